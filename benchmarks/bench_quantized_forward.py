"""Forward-pass cost of fake quantization, as ratios to the float model, in one process:

- float: the unmodified model;
- unchanged bits: our QuantizedModel evaluated again with the same bit widths (the cached
  quantized weights are reused; only activations are quantized);
- changed bits: every layer's bit widths changed before each pass and its weight cache
  emptied, so every weight is quantized again (the worst case of an exploration step);
- modelopt: the same configuration applied by NVIDIA modelopt, when it is installed.

    python benchmarks/bench_quantized_forward.py [--model resnet18] [--batch 16] [--size 224]
"""

from __future__ import annotations

import argparse
import copy
import random
import statistics
import time

import torch

from model_explorer.deployment.toolchains import modelopt_config
from model_explorer.models import MODELS, create_model
from model_explorer.quantization import QuantizedModel


def interleaved_medians(variants: dict, repeats: int) -> dict[str, float]:
    """Median seconds of each variant's forward, timed in turn within every repeat, so that
    drift in the machine's speed affects all variants alike. A variant is (forward, before)."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for forward, before in variants.values():
        if before is not None:
            before()
        forward()  # warm-up
    for _ in range(repeats):
        for name, (forward, before) in variants.items():
            if before is not None:
                before()
            started = time.perf_counter()
            forward()
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def sample_shape(name: str, size: int) -> tuple[int, ...]:
    """One sample's shape: a built-in model's own, else a 3 x size x size image."""
    return MODELS.get(name).info.input_shape if name in MODELS else (3, size, size)


def build(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if name in MODELS:
        return create_model(name).eval()
    return create_model(f"torchvision:{name}", num_classes=1000).eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18", help="built-in or torchvision model name")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--size", type=int, default=224, help="image height and width")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    float_model = build(args.model).to(device)
    shape = sample_shape(args.model, args.size)
    x = torch.randn(args.batch, *shape, device=device)
    quantized = QuantizedModel(copy.deepcopy(float_model)).to(device)
    quantized.calibrate([x], method="max")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def run(model):
        def forward():
            model(x)
            sync()

        return forward

    rng = random.Random(0)

    def change_every_layer():
        quantized.bit_widths = [rng.randint(4, 12) for _ in quantized.bit_widths]
        for layer in quantized.layers.values():
            layer.weight_quantizer._cache.clear()

    variants = {
        "float": (run(float_model), None),
        "unchanged bits": (run(quantized), None),
        "changed bits": (run(quantized), change_every_layer),
    }
    try:
        import modelopt.torch.quantization as mtq
    except ImportError:
        mtq = None
    if mtq is not None:
        theirs = mtq.quantize(
            copy.deepcopy(float_model), modelopt_config(quantized), lambda m: m(x)
        )
        variants["modelopt"] = (run(theirs), None)
    with torch.inference_mode():
        results = interleaved_medians(variants, args.repeats)
    print(
        f"{args.model}, batch {args.batch} x {tuple(shape)}, {device}, "
        f"{torch.get_num_threads()} threads, {len(quantized.layers)} quantized layers, "
        f"median of {args.repeats}"
    )
    for name, seconds in results.items():
        print(f"  {name:15s} {seconds * 1e3:9.2f} ms  {seconds / results['float']:5.2f}x float")


if __name__ == "__main__":
    main()
