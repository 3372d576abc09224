"""What an exported configuration costs in the runtimes, as ratios within one process: the
model quantized to 8 bits everywhere (with and without operand quantizers, and with 4-bit
weights), exported in QDQ form, against the float model exported to ONNX, each run by
onnxruntime and by OpenVINO on the CPU; and the files' sizes. With `--workload`, also the
accuracy of the 8-bit file with operand quantizers in onnxruntime beside the fake-quantized
model's, on the workload's exploration data.

    python benchmarks/bench_deployment.py [--model resnet18] [--batch 16] [--repeats 10]
        [--runtimes onnxruntime openvino openvino:f32]
        [--workload workloads/resnet20_digits.yaml --weights results/resnet20_digits_baseline.pt]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from bench_quantized_forward import build, interleaved_medians, sample_shape

from model_explorer.deployment.export import export_qdq
from model_explorer.deployment.runtimes import describe_kernels, open_runtime
from model_explorer.quantization import QuantizedModel
from model_explorer.tracing.onnx_export import export_onnx


def quantized(
    model: torch.nn.Module, x: torch.Tensor, weight_bits: int, operands: bool = False
) -> QuantizedModel:
    """Every layer at 8-bit inputs and `weight_bits` weights, calibrated on `x` (percentile)."""
    quantized_model = QuantizedModel(model, operand_quantizers=operands)
    quantized_model.calibrate([x], "percentile")
    for layer in quantized_model.layers.values():
        layer.input_quantizer.num_bits = 8
        layer.weight_quantizer.num_bits = weight_bits
    return quantized_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18", help="built-in or torchvision model name")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--size", type=int, default=224, help="image height and width")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument(
        "--runtimes",
        nargs="+",
        default=["onnxruntime", "openvino"],
        help="NAME or NAME:SETTING of each runtime (openvino:f32: float32 inference precision)",
    )
    parser.add_argument("--workload", help="a workload whose accuracy gap to measure")
    parser.add_argument("--weights", help="its trained weights (else model.weights)")
    args = parser.parse_args()
    if args.workload:
        accuracy_gap(Path(args.workload), args.weights)
    shape = sample_shape(args.model, args.size)
    x = torch.randn(args.batch, *shape)
    folder = Path(tempfile.mkdtemp(prefix="bench_deployment_"))
    files = {"float": export_onnx(build(args.model), x[:1], folder / "float.onnx", True)}
    for name, bits, operands in (
        ("int8", 8, False),
        ("int8, operand quant.", 8, True),
        ("int8, int4 weights", 4, False),
    ):
        model = quantized(build(args.model), x, bits, operands)
        files[name] = export_qdq(model, x[:1], folder / f"{bits}{operands}.onnx").path
    float_size = files["float"].stat().st_size
    print(f"{args.model}, batch {args.batch}, {torch.get_num_threads()} threads")
    print(f"{'file':<22}{'MB':>8}{'x float':>9}")
    for name, path in files.items():
        size = path.stat().st_size
        print(f"{name:<22}{size / 1e6:>8.2f}{size / float_size:>9.3f}")
    inputs = x.numpy()
    for runtime in args.runtimes:
        sessions = {name: open_runtime(runtime, path) for name, path in files.items()}
        variants = {name: (lambda s=s: s.run(inputs), None) for name, s in sessions.items()}
        times = interleaved_medians(variants, args.repeats)
        print(f"\n{runtime}: {'ms':>7} {'x float':>8}  integer products")
        for name, seconds in times.items():
            kernels = describe_kernels(sessions[name].kernels(), [])
            count = len(kernels["integer"])
            total = count + len(kernels["float"])
            ratio = seconds / times["float"]
            print(f"  {name:<20}{seconds * 1e3:>7.1f} {ratio:>8.2f}  {count} of {total}")


def accuracy_gap(workload: Path, weights: str | None) -> None:
    """Top-1 of the workload's model with every quantizer at 8 bits and operand quantizers,
    fake-quantized and exported (run by onnxruntime), on its exploration data."""
    import numpy as np
    import yaml

    from model_explorer.operations.pipeline import calibrate_workload
    from model_explorer.workload.context import WorkloadContext
    from model_explorer.workload.file import Workload

    data = yaml.safe_load(workload.read_text())
    body = data["workload"]
    body["quantization"] = {**(body.get("quantization") or {}), "operand_quantizers": True}
    if weights:
        body["model"]["weights"] = weights
    folder = Path(tempfile.mkdtemp(prefix="bench_deployment_"))
    body["calibration"]["file"] = str(folder / "calibration.pt")
    context = WorkloadContext(Workload.from_dict(data), device="cpu")
    model, _, _ = calibrate_workload(context)
    model.bit_widths = [8] * len(model.bit_widths)
    batches = list(context.batches("exploration"))
    inputs = torch.cat([batch[0] for batch in batches])
    labels = torch.cat([batch[1] for batch in batches]).numpy()
    with torch.no_grad():
        fake = model(inputs).argmax(1).numpy()
    path = export_qdq(model, inputs[:1], folder / "model.onnx").path
    exported = open_runtime("onnxruntime", path).run(inputs.numpy()).argmax(1)
    print(
        f"{workload.name}, {len(labels)} samples, all 8 bits with operand quantizers: top-1 "
        f"fake-quantized {100 * np.mean(fake == labels):.2f}%, exported in onnxruntime "
        f"{100 * np.mean(exported == labels):.2f}%, predictions differing on "
        f"{int(np.sum(fake != exported))}\n"
    )


if __name__ == "__main__":
    main()
