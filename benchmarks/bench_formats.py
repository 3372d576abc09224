"""Cost of the quantizer formats' fake quantization, as ratios within one process:

- per tensor: fake-quantizing one activation-sized tensor (16 x 64 x 56 x 56, blocks along the
  channels) in each format, against a float conv of the same tensor, and against the peers'
  own fake quantization where they run on the CPU (torchao's MX and NVFP4 round trips along the
  last axis; modelopt's FP8 and static block INT);
- per model: a forward pass of the model with every quantizer in one format, against the float
  model (the integer format with cached weights, as a search evaluates a candidate).

- per size: each format from a digits model's activation (7,680 values) to a large network's
  (3.2 M).

Ours is timed twice, interleaved: with the C kernels of formats/kernels.py (the default) and with
the eager steps (as with MODEL_EXPLORER_COMPILE=0). The process keeps freed memory
as a search does (memory.keep_freed_memory).

    python benchmarks/bench_formats.py [--model resnet18] [--batch 8] [--repeats 7]

(`--model digits_cnn --batch 120`: a digits model's batch, its own sample shape.)
"""

from __future__ import annotations

import argparse
import copy
import os

import torch
from bench_quantized_forward import build, interleaved_medians, sample_shape

from model_explorer.formats import parse_format
from model_explorer.formats.blocks import (
    fp8_fake_quantize,
    group_int_fake_quantize,
    mx_fake_quantize,
    nvfp4_fake_quantize,
)
from model_explorer.formats.elements import ELEMENTS
from model_explorer.formats.integer import fake_quantize
from model_explorer.memory import keep_freed_memory
from model_explorer.native import ENVIRONMENT_SWITCH
from model_explorer.quantization import QuantizedModel

FORMATS = ["int8", "int4_g128", "fp8_e4m3", "mxfp8", "mxfp6_e2m3", "mxfp4", "mxint8", "nvfp4"]


def ours(name: str, x: torch.Tensor, amax: torch.Tensor):  # noqa: ANN201
    element = {"mxfp8": "e4m3", "mxfp6_e2m3": "e2m3", "mxfp4": "e2m1", "mxint8": "int8"}
    if name == "int8":
        return lambda: fake_quantize(x, amax, 8)
    if name == "int4_g128":
        return lambda: group_int_fake_quantize(x, 4, 128, 1)
    if name == "fp8_e4m3":
        return lambda: fp8_fake_quantize(x, amax, ELEMENTS["e4m3"])
    if name == "nvfp4":
        return lambda: nvfp4_fake_quantize(x, amax, 16, 1)
    return lambda: mx_fake_quantize(x, ELEMENTS[element[name]], 32, 1)


def peer(name: str, x: torch.Tensor, amax: torch.Tensor):  # noqa: ANN201
    """The peer's own fake quantization of the same values (last axis: the peers' layout), or
    None where no peer runs this format on the CPU."""
    last = x.movedim(1, -1).reshape(-1, x.shape[1]).contiguous()  # rows of channels
    try:
        if name in ("mxfp8", "mxfp6_e2m3", "mxfp4"):
            from torchao.prototype.mx_formats import mx_tensor
            from torchao.prototype.mx_formats.constants import DTYPE_FP6_E2M3

            dtype = {
                "mxfp8": torch.float8_e4m3fn,
                "mxfp6_e2m3": DTYPE_FP6_E2M3,
                "mxfp4": torch.float4_e2m1fn_x2,
            }[name]

            def run() -> torch.Tensor:
                scale, data = mx_tensor.to_mx(last, dtype, 32)
                return mx_tensor.to_dtype(data, scale, dtype, 32, torch.float32)

            return "torchao", run
        if name == "nvfp4":
            from torchao.prototype.mx_formats import nvfp4_tensor

            scale = nvfp4_tensor.per_tensor_amax_to_scale(amax)
            tensor = nvfp4_tensor.NVFP4Tensor
            return "torchao", lambda: tensor.to_nvfp4(last, per_tensor_scale=scale).dequantize()
        if name in ("fp8_e4m3", "int4_g128", "int8"):
            from modelopt.torch.quantization.config import QuantizerAttributeConfig
            from modelopt.torch.quantization.nn import TensorQuantizer

            config = {
                "fp8_e4m3": {"num_bits": (4, 3)},
                "int4_g128": {"num_bits": 4, "block_sizes": {-1: 128}},
                "int8": {"num_bits": 8},
            }[name]
            quantizer = TensorQuantizer(QuantizerAttributeConfig(**config))
            if name != "int4_g128":
                quantizer.amax = amax
            return "modelopt", lambda: quantizer(last)
    except ImportError:
        return None
    return None


def kernels(on: bool):  # noqa: ANN201
    """A variant's `before`: the C kernels on or off (the eager steps) for the calls that
    follow."""
    return lambda: os.environ.__setitem__(ENVIRONMENT_SWITCH, "1" if on else "0")


def tensor_table(repeats: int) -> None:
    torch.manual_seed(0)
    with torch.inference_mode():  # as a search's scoring makes its activations
        x = torch.randn(16, 64, 56, 56)
    amax = x.abs().max()
    conv = torch.nn.Conv2d(64, 64, 3, padding=1).eval()
    print(f"one tensor {tuple(x.shape)}, {torch.get_num_threads()} threads: median ms, ratios")
    print("format        ours   /conv3x3   eager   /ours   peer            /ours")
    with torch.inference_mode():
        for name in FORMATS:
            variants = {
                "conv": (lambda: conv(x), None),
                "ours": (ours(name, x, amax), kernels(True)),
                "eager": (ours(name, x, amax), kernels(False)),
            }
            found = peer(name, x, amax)
            if found is not None:
                variants["peer"] = (found[1], None)
            times = interleaved_medians(variants, repeats)
            mine, conv_time, eager = times["ours"], times["conv"], times["eager"]
            line = f"{name:<12} {mine * 1e3:6.1f}   {mine / conv_time:6.2f}x"
            line += f"   {eager * 1e3:5.1f}  {eager / mine:5.2f}x"
            if found is not None:
                theirs = times["peer"]
                line += f"   {found[0]:<8} {theirs * 1e3:6.1f}  {theirs / mine:6.2f}x"
            print(line)


def sizes_table(repeats: int) -> None:
    """Every format by its C kernel (formats/kernels.py, the default) and by its eager steps, at
    sizes from a digits model's activation to a large network's (blocks along the channels)."""
    print(f"\n{torch.get_num_threads()} threads: median us")
    print("format          values    kernel     eager  /kernel")
    for shape in ((120, 64), (120, 16, 8, 8), (16, 64, 56, 56)):
        with torch.inference_mode():
            x = torch.randn(shape)
        amax = x.abs().max()
        for name in FORMATS:
            run = ours(name, x, amax)
            with torch.inference_mode():
                ways = {"kernel": (run, kernels(True)), "eager": (run, kernels(False))}
                times = interleaved_medians(ways, repeats)
            kernels(True)()
            kernel, eager = times["kernel"] * 1e6, times["eager"] * 1e6
            line = f"{name:<12} {x.numel():>9,}  {kernel:8.1f}"
            print(line + f"  {eager:8.1f}  {eager / kernel:6.2f}x")


def model_table(model_name: str, batch: int, size: int, repeats: int) -> None:
    float_model = build(model_name)
    x = torch.randn(batch, *sample_shape(model_name, size))
    quantized = QuantizedModel(copy.deepcopy(float_model))
    quantized.calibrate([x], method="max")
    shape = "x".join(str(n) for n in x.shape[1:])
    print(f"\n{model_name}, batch {batch} x {shape}: forward with every quantizer in")
    variants = {"float": (lambda: float_model(x), None)}
    for name in FORMATS:
        chosen = parse_format(name)
        for on in (True, False):

            def before(chosen=chosen, on=on) -> None:
                kernels(on)()
                for quantizer in quantized.quantizers.values():
                    quantizer.format = chosen

            variants[(name, on)] = (lambda: quantized(x), before)
    with torch.inference_mode():
        times = interleaved_medians(variants, repeats)
    reference = times["float"]
    print(f"float {reference * 1e3:.0f} ms; C kernels, then eager steps")
    for name in FORMATS:
        fused, eager = times[(name, True)], times[(name, False)]
        print(
            f"{name:<12} {fused * 1e3:7.0f} ms  {fused / reference:5.2f}x"
            f"   {eager * 1e3:7.0f} ms  {eager / reference:5.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    keep_freed_memory()
    tensor_table(args.repeats)
    sizes_table(max(args.repeats, 51))
    model_table(args.model, args.batch, args.size, args.repeats)


if __name__ == "__main__":
    main()
