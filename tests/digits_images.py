"""scikit-learn's digits written the two ways the original tool read ImageNet: an image folder
(`<root>/<class>/<image>.png`) and WebDataset tar shards (`<key>.png` + `<key>.cls`), holding
the same images in the same order (ImageFolder's: by class folder, then file name), so that
position i is the same image in both."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image


@dataclass
class DigitsImages:
    folder: Path  # ImageFolder root
    pattern: str  # brace pattern of the shards
    shards: list[Path]
    labels: list[int]  # in the shared order


def png_bytes(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def write_digits_images(
    root: Path,
    indices: np.ndarray,
    shards: int = 3,
    image_key: str = "png",
    label_key: str = "cls",
) -> DigitsImages:
    """The digits at `indices` as 8-bit grey PNGs, in a folder and in `shards` tar files
    written with webdataset's TarWriter."""
    import webdataset as wds
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = (digits.images * (255 / 16)).round().astype(np.uint8)
    folder = root / "folder"
    entries = []
    for index in indices:
        label = int(digits.target[index])
        name = f"img{index:04d}"
        path = folder / f"class{label}" / f"{name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png_bytes(pixels[index]))
        entries.append((f"class{label}", f"{name}.png", name, label, pixels[index]))
    entries.sort()
    (root / "shards").mkdir(parents=True, exist_ok=True)
    files = [root / "shards" / f"digits-{number:02d}.tar" for number in range(shards)]
    for number, file in enumerate(files):
        with wds.TarWriter(str(file)) as writer:
            for _, _, key, label, image in _chunk(entries, shards, number):
                writer.write({"__key__": key, image_key: png_bytes(image), label_key: label})
    pattern = str(root / "shards" / f"digits-{{00..{shards - 1:02d}}}.tar")
    return DigitsImages(folder, pattern, files, [entry[3] for entry in entries])


def _chunk(entries: list, shards: int, number: int) -> list:
    """The `number`-th of `shards` consecutive runs of `entries`."""
    size = -(-len(entries) // shards)
    return entries[number * size : (number + 1) * size]
