"""Evaluation through a TensorCache vs. through a DataLoader (what the original tool did for every
candidate), measured as a ratio in one process, on two kinds of data:

- the default digits workload (samples already held as tensors: only batching is saved), and
- an image folder of PNG files written to a temporary directory (decoding is saved too).

    python benchmarks/bench_data_cache.py [--repeats N] [--images N]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from prepared import median_seconds

from model_explorer.metrics.functions import evaluate
from model_explorer.workload.context import WorkloadContext
from model_explorer.workload.file import Workload


def write_image_folder(root: Path, images: int) -> None:
    rng = np.random.default_rng(0)
    for index in range(images):
        folder = root / f"class{index % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{index}.png")


def compare(context: WorkloadContext, role: str, repeats: int) -> None:
    model = context.build_model(load_weights=context.workload.model.weights is not None)
    loader, cache = context.loader(role), context.batches(role)
    metric = context.workload.metric
    through_loader = median_seconds(lambda: evaluate(model, loader, metric), repeats)
    through_cache = median_seconds(lambda: evaluate(model, cache, metric), repeats)
    print(
        f"{context.workload.name}: {cache.num_samples} samples on {context.device}, "
        f"{torch.get_num_threads()} threads: DataLoader {through_loader * 1e3:.1f} ms, "
        f"TensorCache {through_cache * 1e3:.1f} ms per evaluation, "
        f"speed-up {through_loader / through_cache:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--images", type=int, default=1024)
    args = parser.parse_args()
    compare(
        WorkloadContext(Workload.load("workloads/digits_cnn.yaml")), "exploration", args.repeats
    )
    with tempfile.TemporaryDirectory() as folder:
        write_image_folder(Path(folder), args.images)
        dataset = {"type": "imagefolder", "path": folder, "resize": None, "crop": None}
        workload = Workload.from_dict(
            {
                "workload": {
                    "name": "resnet20 on PNG files",
                    "model": {"type": "resnet20"},
                    "exploration": {"datasets": {"exploration": {**dataset, "batch_size": 256}}},
                }
            }
        )
        compare(WorkloadContext(workload), "exploration", args.repeats)


if __name__ == "__main__":
    main()
