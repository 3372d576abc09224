"""Samples streamed from WebDataset tar shards: `<key>.jpg|jpeg|png` (or the original tool's
`<key>.input.jpeg`) with `<key>.cls` (or `<key>.target.cls`), read with the webdataset library.

A stream has no length of its own: the spec declares it (`total_samples`). In stored order
(shards in the order the pattern lists them, samples in tar order) it is the order of positions
that `pick` takes subsets by; for training it is shuffled by the workload seed, shards and then
samples through a buffer, differently but reproducibly each pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from model_explorer.datasets.base import SampleStream
from model_explorer.errors import UserError

IMAGE_KEYS = "jpg;jpeg;png;input.jpeg;input.jpg;input.png"
LABEL_KEYS = "cls;target.cls"


class ShardStream(SampleStream):
    """(image, label) pairs from tar shards; `transform` turns the RGB PIL image into a tensor."""

    def __init__(
        self,
        shards: Sequence[str],
        length: int,
        transform: Callable[[Any], Any],
        buffer: int = 10000,
        where: str = "dataset",
    ) -> None:
        self.shards = list(shards)
        self.length = length
        self.transform = transform
        self.buffer = buffer
        self.where = where
        self.seed: int | None = None
        self.passes = 0

    def __len__(self) -> int:
        return self.length

    def shuffle_by(self, seed: int) -> None:
        self.seed = seed
        self.passes = 0

    def __iter__(self) -> Iterator[tuple[Any, int]]:
        import webdataset as wds

        stages: list[Any] = [wds.SimpleShardList(self.shards)]
        if self.seed is not None:
            # Each pass draws its own order from (seed, pass); detshuffle counts from epoch + 1.
            epoch = self.passes - 1
            self.passes += 1
            stages.append(wds.detshuffle(len(self.shards), 0, seed=self.seed, epoch=epoch))
        stages += [wds.split_by_worker, wds.tarfile_to_samples()]
        if self.seed is not None:
            initial = min(self.buffer, 100)
            stages.append(wds.detshuffle(self.buffer, initial, seed=self.seed, epoch=epoch))
        for image, label, _ in self._decoded(wds.DataPipeline(*stages)):
            yield image, label

    def pick(self, indices: Sequence[int]) -> list[tuple[Any, int]]:
        """The samples at these positions of the stored order, decoded, in the order given;
        reading stops after the last one."""
        import webdataset as wds

        slots = {int(position): slot for slot, position in enumerate(indices)}
        last = max(slots, default=-1)

        seen = [0]  # samples the shards held, up to the last one needed

        def numbered(samples: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
            for position, sample in enumerate(samples):
                seen[0] = position + 1
                if position in slots:
                    yield {**sample, "__position__": position}
                if position >= last:
                    return

        source = wds.DataPipeline(
            wds.SimpleShardList(self.shards), wds.tarfile_to_samples(), numbered
        )
        found: list[Any] = [None] * len(slots)
        for image, label, position in self._decoded(source):
            found[slots[position]] = (image, label)
        if any(item is None for item in found):
            raise UserError(
                f"{self.where}.total_samples: {self.length} samples declared, but the shards of "
                f"'{self.where}.path' hold {seen[0]} ({last + 1} needed); set total_samples to the "
                "number of samples in all shards"
            )
        return found

    def _decoded(self, samples: Any) -> Iterator[tuple[Any, int, Any]]:
        import webdataset as wds

        pipeline = wds.DataPipeline(
            lambda: iter(samples),
            wds.decode("pilrgb"),
            wds.to_tuple(IMAGE_KEYS, LABEL_KEYS, "__position__", missing_is_error=False),
        )
        try:
            for image, label, position in pipeline:
                if image is None or label is None:
                    raise UserError(
                        f"{self.where}.path: a sample in the shards has no image "
                        "(<key>.jpg, .jpeg or .png) or no label (<key>.cls); each sample needs both"
                    )
                yield self.transform(image), int(label), position
        except wds.autodecode.DecodingError as error:
            raise UserError(
                f"{self.where}.path: cannot decode '{error.k}' of sample '{error.key}' in "
                f"'{error.url}' ({error.__cause__})"
            ) from error
