"""Would numba or torch.compile do instead of the C kernels (native/fake_quantize.c)? The integer
format's fake quantization, the kernel every bit-width search runs, in four implementations:

- ours: the C kernel through ctypes (formats/kernels.native_integer), which leaves tensors
  below INTEGER_SMALLEST values to the eager steps; and the kernel on every size;
- numba: the same loop, `@njit` (one thread) and `@njit(parallel=True)` (from 131,072 values,
  where ours splits across threads too), compiled before any timing;
- inductor: `torch.compile` of the eager steps (dynamic shapes, so one compilation serves
  every size), compiled before any timing;
- eager: the four ATen steps, what `MODEL_EXPLORER_COMPILE=0` runs.

Each is first checked against the eager steps bit for bit on every size below, then timed
(a) alone, on tensors of the sizes a candidate quantizes (medians of many calls), and (b)
inside candidates: every integer quantizer's call goes through it while a workload's
candidates are scored, each candidate timed with every implementation in turn; the medians,
and per implementation the paired t interval of its time minus ours.

    python benchmarks/bench_kernel_choices.py [WORKLOAD ...] [--candidates N]

First, what the same kernel costs a call registered as a torch operator (torch.library.custom_op
with a fake registration, and the lower-level torch.library.Library), against the ctypes call
the package makes, on a small tensor: the dispatcher's share of a quantizer call.

Default: digits_cnn and resnet20_digits, and efficientnet_lite0_photos where the photos extra
is installed. Needs numba (the agemoea extra) and a C++ compiler for inductor.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from prepared import random_candidates

from model_explorer.formats import kernels
from model_explorer.metrics.functions import evaluate
from model_explorer.results.statistics import paired_means

ORIGINAL = kernels.native_integer
SIZES = [(120, 16, 8, 8), (120, 32, 4, 4), (128, 32, 112, 112), (64, 576)]


def _numba_functions() -> tuple[Callable, Callable]:
    """The kernel's loop in numba: rows of `inner` values (a channel's run, or a chunk of a
    tensor quantized per tensor), the row's multiplier and divisor read once, so that the
    inner loop vectorises as the C kernel's does (an index divided per value made it 40 times
    slower)."""
    import numba

    @numba.njit(inline="always")
    def row(x, out, multiplier, divisor, channels, inner, low, high, floor, ceiling, r):  # noqa: ANN001, ANN202
        scale, back = multiplier[r % channels], divisor[r % channels]
        for i in range(r * inner, min((r + 1) * inner, x.size)):
            value = min(max(x[i], floor), ceiling)
            out[i] = min(max(np.rint(value * scale), low), high) / back

    @numba.njit
    def serial(x, out, multiplier, divisor, channels, inner, low, high, floor, ceiling):  # noqa: ANN001, ANN202
        for r in range(-(-x.size // inner)):
            row(x, out, multiplier, divisor, channels, inner, low, high, floor, ceiling, r)

    @numba.njit(parallel=True)
    def parallel(x, out, multiplier, divisor, channels, inner, low, high, floor, ceiling):  # noqa: ANN001, ANN202
        for r in numba.prange(-(-x.size // inner)):
            row(x, out, multiplier, divisor, channels, inner, low, high, floor, ceiling, r)

    return serial, parallel


def numba_integer(serial: Callable, parallel: Callable) -> Callable:
    def run(x, multiplier, low, high, divisor, axis, bounds=None, overwrite=False):  # noqa: ANN001, ANN202, ARG001
        if not kernels.takes(x) or not x.is_contiguous():
            return None
        channels = 1 if axis is None else x.shape[axis]
        inner = 1 << 16 if axis is None else int(np.prod(x.shape[axis + 1 :]))
        floor, ceiling = bounds or kernels.UNBOUNDED
        out = torch.empty_like(x)
        f32 = np.float32
        arguments = (
            x.numpy().reshape(-1),
            out.numpy().reshape(-1),
            multiplier.detach().float().contiguous().numpy().reshape(-1),
            divisor.detach().float().contiguous().numpy().reshape(-1),
            channels,
            inner,
            f32(low),
            f32(high),
            f32(floor),
            f32(ceiling),
        )
        (parallel if x.numel() >= kernels.THREADED_VALUES else serial)(*arguments)
        return out

    return run


def _steps(x, multiplier, divisor, low, high, floor, ceiling):  # noqa: ANN001, ANN202
    return (x.clamp(floor, ceiling) * multiplier).round().clamp(low, high).div(divisor)


def inductor_integer() -> Callable:
    """The eager steps compiled; the bounds and the integers' range handed in as 0-d tensors
    (as Python floats each value would be a compilation of its own)."""
    torch._dynamo.config.cache_size_limit = 64  # one graph per rank, none falls back to eager
    compiled = torch.compile(_steps, dynamic=True)
    scalars: dict[float, torch.Tensor] = {}

    def scalar(value: float) -> torch.Tensor:
        return scalars.get(value) or scalars.setdefault(value, torch.tensor(float(value)))

    def run(x, multiplier, low, high, divisor, axis, bounds=None, overwrite=False):  # noqa: ANN001, ANN202, ARG001
        if not kernels.takes(x) or not x.is_contiguous():
            return None
        if axis is not None:
            shape = [1] * x.dim()
            shape[axis] = -1
            multiplier, divisor = multiplier.view(shape), divisor.view(shape)
        floor, ceiling = bounds or kernels.UNBOUNDED
        bounds = [scalar(value) for value in (low, high, floor, ceiling)]
        return compiled(x, multiplier, divisor, *bounds)

    return run


def every_size(*args, **kwargs):  # noqa: ANN002, ANN003, ANN201
    """Our kernel on tensors of every size (the package leaves those below
    kernels.INTEGER_SMALLEST values to the eager steps)."""
    smallest, kernels.INTEGER_SMALLEST = kernels.INTEGER_SMALLEST, 0
    try:
        return ORIGINAL(*args, **kwargs)
    finally:
        kernels.INTEGER_SMALLEST = smallest


def eager_integer(*args, **kwargs):  # noqa: ANN002, ANN003, ANN201, ARG001
    return None


def operator_cost() -> None:
    """The integer kernel called directly, and as a registered operator two ways."""

    @torch.library.custom_op("bench_kernel_choices::integer", mutates_args=())
    def as_custom_op(
        x: torch.Tensor, multiplier: torch.Tensor, divisor: torch.Tensor
    ) -> torch.Tensor:
        return ORIGINAL(x, multiplier, -8, 7, divisor, None)

    @as_custom_op.register_fake
    def _(x, multiplier, divisor):  # noqa: ANN001, ANN202
        return torch.empty_like(x)

    library = torch.library.Library("bench_kernel_choices_low", "DEF")
    library.define("integer(Tensor x, Tensor multiplier, Tensor divisor) -> Tensor")
    library.impl("integer", lambda x, m, d: ORIGINAL(x, m, -8, 7, d, None), "CPU")
    low_level = torch.ops.bench_kernel_choices_low.integer.default
    x, multiplier, divisor = torch.randn(16, 64), torch.tensor([3.0]), torch.tensor([3.0])
    calls = {
        "ctypes (ours)": lambda: ORIGINAL(x, multiplier, -8, 7, divisor, None),
        "custom_op": lambda: as_custom_op(x, multiplier, divisor),
        "Library.impl": lambda: low_level(x, multiplier, divisor),
        "eager steps": lambda: (x * multiplier).round_().clamp_(-8, 7).div_(divisor),
    }
    print("A call on a 16x64 tensor (median of 20,000, us):")
    with torch.inference_mode():
        for name, call in calls.items():
            times = []
            for _ in range(20_000):
                started = time.perf_counter()
                call()
                times.append(time.perf_counter() - started)
            print(f"  {name:<14} {statistics.median(times) * 1e6:6.1f}")
    print()


def check(implementations: dict[str, Callable]) -> None:
    """Every implementation gives the eager steps' values bit for bit, per tensor and per
    channel, with and without bounds (rounding midpoints among the values)."""
    generator = torch.Generator().manual_seed(0)
    for size in SIZES:
        x = torch.randn(size, generator=generator) * 3
        every = x.view(-1)[::7]  # rounding midpoints of the multipliers below among them
        every.copy_(torch.arange(-20, 20, 0.5).repeat(every.numel() // 80 + 1)[: every.numel()])
        for axis, bounds in ((None, None), (1, None), (None, (0.0, 6.0))):
            channels = 1 if axis is None else x.shape[axis]
            multiplier = torch.linspace(2.0, 9.0, channels)
            divisor = multiplier.clone()
            view = [1, -1, *[1] * (x.dim() - 2)] if axis is not None else [-1]
            expected = _steps(
                x,
                multiplier.view(view),
                divisor.view(view),
                -8.0,
                7.0,
                *(bounds or kernels.UNBOUNDED),
            )
            for name, run in implementations.items():
                got = run(x, multiplier, -8, 7, divisor, axis, bounds)
                if got is not None and not torch.equal(
                    got.view(torch.int32), expected.view(torch.int32)
                ):
                    raise AssertionError(
                        f"{name} differs from the eager steps on {size}, axis {axis}"
                    )


def alone(implementations: dict[str, Callable]) -> None:
    print("Alone (median of the calls, us):")
    print("| tensor | " + " | ".join(implementations) + " |")
    print("|---|" + "---|" * len(implementations))
    multiplier, divisor = torch.tensor([3.0]), torch.tensor([3.0])
    for size in SIZES:
        x = torch.randn(size)
        repeats = max(5, int(2e7 // x.numel()))
        row = []
        for run in implementations.values():
            times = []
            for _ in range(min(repeats, 2000)):
                started = time.perf_counter()
                if run(x, multiplier, -8, 7, divisor, None) is None:
                    (x * multiplier).round_().clamp_(-8, 7).div_(divisor)
                times.append(time.perf_counter() - started)
            row.append(f"{statistics.median(times) * 1e6:.1f}")
        print(f"| {'x'.join(map(str, size))} | " + " | ".join(row) + " |")


def inside(path: str, implementations: dict[str, Callable], candidates: int) -> None:
    workload, context, problem, model, batches, genomes = random_candidates(path, candidates)
    scores: dict[str, list] = {name: [] for name in implementations}
    times: dict[str, list[float]] = {name: [] for name in ["float", *implementations]}
    names = list(times)
    for round_ in range(2):  # the first round meets every width and compiles: not timed
        for index, genome in enumerate(genomes):
            # each candidate its own order, so that none pays for coming first (the model set
            # to the candidate's widths) more often than another
            for name in names[index % len(names) :] + names[: index % len(names)]:
                started = time.perf_counter()
                if name == "float":
                    evaluate(model, batches, workload.metric)
                else:
                    kernels.native_integer = implementations[name]
                    _, evaluation = problem.evaluate(genome)
                    if round_:
                        scores[name].append(evaluation.values)
                if round_:
                    times[name].append(time.perf_counter() - started)
    kernels.native_integer = ORIGINAL
    reference = statistics.median(times["float"])
    threads = torch.get_num_threads()
    print(
        f"\n{workload.name}, {candidates} candidates ({threads} threads), "
        f"float forward {reference * 1e3:.1f} ms:"
    )
    print("| implementation | candidate, median | x float | minus ours (95% interval) |")
    print("|---|---|---|---|")
    for name in implementations:
        median = statistics.median(times[name])
        versus = paired_means(times[name], times["ours"])
        print(
            f"| {name} | {median * 1e3:.1f} ms | {median / reference:.2f}x | "
            f"{versus.difference * 1e3:+.2f} ms ({versus.low * 1e3:+.2f} to "
            f"{versus.high * 1e3:+.2f}, p {versus.p_value:.2g}) |"
        )
    same = all(scores[name] == scores["ours"] for name in implementations)
    print(f"the same scores with every implementation: {same}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*")
    parser.add_argument("--candidates", type=int, default=10)
    args = parser.parse_args()
    serial, parallel = _numba_functions()
    implementations = {
        "ours": ORIGINAL,
        "ours, every size": every_size,
        "numba": numba_integer(serial, parallel),
        "inductor": inductor_integer(),
        "eager": eager_integer,
    }
    operator_cost()
    check(implementations)
    print("Every implementation gives the eager steps' values bit for bit.\n")
    alone(implementations)
    workloads = args.workloads or ["workloads/digits_cnn.yaml", "workloads/resnet20_digits.yaml"]
    if not args.workloads and importlib.util.find_spec("efficientnet_lite_pytorch") is not None:
        workloads.append("workloads/efficientnet_lite0_photos.yaml")
    for path in workloads:
        inside(path, implementations, args.candidates)


if __name__ == "__main__":
    main()
