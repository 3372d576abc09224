"""What TVM's optimisation levels change for compare's `tvm` environment, measured in one
process: the model captured by torch.export, compiled with the target's default Relax pipeline
at each PassContext level (and, for contrast, with `tvm.compile`'s own unfused default), then
for each its compile time, its kernels (TensorIR functions after the pipeline), its time per
batch as a ratio to eager PyTorch, and whether its logits are bit-identical to level 3's.

    python benchmarks/bench_tvm_levels.py [--model resnet18] [--batch 1] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from bench_quantized_forward import build, interleaved_medians, sample_shape

from model_explorer.deployment.runtimes.tvm import compile_relax


def main() -> None:
    import tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18", help="built-in or torchvision model name")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--size", type=int, default=224, help="image height and width")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    model = build(args.model)
    x = torch.randn(args.batch, *sample_shape(args.model, args.size))
    with torch.no_grad():
        module = from_exported_program(torch.export.export(model, (x,)))
    target = tvm.target.Target("llvm")
    pipelines = {f"level {level}": level for level in range(5)}
    runs, kernels, compile_seconds = {}, {}, {}
    for name, level in pipelines.items():
        started = time.perf_counter()
        runs[name] = compile_relax(module, "llvm", level)
        compile_seconds[name] = time.perf_counter() - started
        with target, tvm.transform.PassContext(opt_level=level):
            lowered = relax.get_default_pipeline(target)(module)
        kernels[name] = sum(isinstance(f, tvm.tirx.PrimFunc) for f in lowered.functions.values())
    unfused = "tvm.compile default (unfused)"
    started = time.perf_counter()
    executable = tvm.compile(module, target=target)
    compile_seconds[unfused] = time.perf_counter() - started
    machine = relax.VirtualMachine(executable, tvm.cpu())
    runs[unfused] = lambda a: [machine["main"](tvm.runtime.tensor(a))[0].numpy()]
    with target:
        lowered = relax.get_pipeline("default_build")(module)
    kernels[unfused] = sum(isinstance(f, tvm.tirx.PrimFunc) for f in lowered.functions.values())

    array = x.numpy()
    reference = runs["level 3"](array)[0]
    variants = {"eager": (lambda: model(x), None)}
    variants.update({name: (lambda run=run: run(array), None) for name, run in runs.items()})
    with torch.no_grad():
        medians = interleaved_medians(variants, args.repeats)
        eager = model(x).numpy()
    print(f"{args.model}, batch {args.batch}, {x.shape[1:]}; eager {medians['eager'] * 1e3:.1f} ms")
    header = ("compile s", "kernels", "x eager", "= level 3", "vs eager")
    print(f"{'':32} " + " ".join(f"{h:>9}" for h in header))
    for name, run in runs.items():
        output = run(array)[0]
        same = np.array_equal(output, reference)
        error = float(np.abs(output - eager).max())
        ratio = medians[name] / medians["eager"]
        print(
            f"{name:32} {compile_seconds[name]:9.1f} {kernels[name]:7d} {ratio:8.2f} "
            f"{str(same):>9} {error:9.1e}"
        )


if __name__ == "__main__":
    main()
