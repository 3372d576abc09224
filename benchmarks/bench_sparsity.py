"""Forward time of a SparseModel divided by the float model's, in one process, for the digits
CNN (360 samples of 8x8; blocks of 8 x 8, and of 4 x 4 as its sparsity workloads have them)
and torchvision's resnet18 on 32x32 inputs (64 samples, blocks of 8 x 8), with every
threshold 0 (block statistics only, the dense layers run) and with a threshold that zeroes
blocks (the layers run as a product with the sparsified input): by the fused kernel
(sparsity/kernel.py), and by the torch path (`MODEL_EXPLORER_COMPILE=0`), timed in turn.

    python benchmarks/bench_sparsity.py [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from model_explorer.models import create_model
from model_explorer.native import ENVIRONMENT_SWITCH
from model_explorer.sparsity import SparseModel


def interleaved(functions: dict, repeats: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in functions}
    for function in functions.values():
        function()
    for _ in range(repeats):
        for name, function in functions.items():
            started = time.perf_counter()
            function()
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def measure(
    name: str,
    shape: tuple[int, ...],
    batch: int,
    threshold: float,
    repeats: int,
    block: tuple[int, int] = (8, 8),
) -> None:
    torch.manual_seed(0)
    model = create_model(name, num_classes=10).eval()
    reference = create_model(name, num_classes=10).eval()
    reference.load_state_dict(model.state_dict())
    x = torch.randn(batch, *shape)
    sparse = SparseModel(model, block_size=block)
    count = len(sparse.thresholds)

    def run(thresholds: list[float], fused: bool = True):
        def forward() -> None:
            os.environ[ENVIRONMENT_SWITCH] = "1" if fused else "0"
            sparse.thresholds = thresholds
            sparse(x)

        return forward

    with torch.inference_mode():
        variants = {
            "float": lambda: reference(x),
            "thresholds 0": run([0.0] * count),
            f"thresholds {threshold}": run([threshold] * count),
            "  torch path, 0": run([0.0] * count, fused=False),
            f"  torch path, {threshold}": run([threshold] * count, fused=False),
        }
        times = interleaved(variants, repeats)
        sparse.reset_stats()
        run([threshold] * count)()
        os.environ.pop(ENVIRONMENT_SWITCH)
    stats = sparse.stats().values()
    share = sum(s["created_blocks"] for s in stats) / sum(s["total_blocks"] for s in stats)
    threads = torch.get_num_threads()
    print(
        f"{name}, batch {batch} x {shape}, blocks {block}, {threads} threads, median of {repeats}:"
    )
    for label, seconds in times.items():
        print(f"  {label:22s} {seconds * 1e3:8.2f} ms  {seconds / times['float']:5.2f}x float")
    print(f"  blocks zeroed at threshold {threshold}: {share:.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threshold", type=float, default=0.3)
    args = parser.parse_args()
    measure("digits_cnn", (1, 8, 8), 360, args.threshold, args.repeats)
    measure("digits_cnn", (1, 8, 8), 360, args.threshold, args.repeats, block=(4, 4))
    measure("torchvision:resnet18", (3, 32, 32), 64, args.threshold, args.repeats)


if __name__ == "__main__":
    main()
