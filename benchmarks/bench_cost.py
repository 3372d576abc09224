"""Time of `analyze_cost` (operation level and leaf-module level) on resnet50 at 1x3x224x224,
divided by the time of one plain forward pass, in one process (median of repeats, timed in turn).

    python benchmarks/bench_cost.py [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torchvision

from model_explorer.cost import analyze_cost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    model = torchvision.models.resnet50().eval()
    x = torch.zeros(1, 3, 224, 224)
    variants = {
        "forward": lambda: model(x),
        "analyze_cost": lambda: analyze_cost(model, x),
        "analyze_cost, leaf modules": lambda: analyze_cost(model, x, leaf_modules_only=True),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    with torch.no_grad():
        for function in variants.values():
            function()
        for _ in range(args.repeats):
            for name, function in variants.items():
                started = time.perf_counter()
                function()
                times[name].append(time.perf_counter() - started)
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"resnet50, 1x3x224x224, {torch.get_num_threads()} threads, median of {args.repeats}:")
    for name, seconds in medians.items():
        print(f"  {name:28s} {seconds * 1e3:8.1f} ms  {seconds / medians['forward']:5.2f}x forward")


if __name__ == "__main__":
    main()
