"""Run the test suite once per kernel setting: what a processor other than yours would run.

torch (ATen's vectorised kernels), MKL (matrix products), oneDNN (convolutions), numpy and its
OpenBLAS pick their kernels by the instruction sets the processor offers, and torch splits
reductions by its thread count. Float sums then round differently, so a result that depends on
the last bits (a short training run, a block mean on a threshold, a gene rounded to a bit width)
may land elsewhere on a contributor's laptop, a cluster node or a GPU box. Each setting below
forces the kernels down to one level through the libraries' own environment variables; a test
suite that passes under all of them holds wherever those libraries run.

    python tests/across_kernels.py                      # every setting, the whole suite
    python tests/across_kernels.py --settings avx2,threads1 -- tests/test_retraining.py
    python tests/across_kernels.py --levels -- tests/formats/test_kernels.py
    make test-kernels         # the first line, then the LiteRT tests in .venv-litert

`--levels` runs the tests once per instruction level this project's C kernels are built for
(native/: with GCC on x86-64 each library holds x86-64-v4, v3 and baseline versions, and the
processor picks one when it is loaded): each level's library is built on its own
(`CC="cc -DNO_CLONES -march=<level>"`, a library of its own in the kernel cache), and the
levels this processor cannot run are named and left out. `make test` runs the kernels'
bit-for-bit tests so, on every level the machine runs.

Each setting prints what the libraries report they use (so a variable they ignore shows), and
the end is a table: per setting, the counts, the minutes, and the tests that failed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]

# numpy's dispatchable x86 feature groups above its X86_V2 (SSE4.2) baseline.
_NUMPY_ABOVE_AVX = "X86_V3 X86_V4 AVX512_ICL AVX512_SPR"


def _forced(aten: str, mkl: str, onednn: str, openblas: str, numpy_off: str) -> dict[str, str]:
    return {
        "ATEN_CPU_CAPABILITY": aten,  # default (no vector extension), avx2, avx512
        "MKL_ENABLE_INSTRUCTIONS": mkl,  # SSE4_2, AVX, AVX2, AVX512
        "ONEDNN_MAX_CPU_ISA": onednn,  # SSE41, AVX, AVX2, AVX512_CORE, ...
        "OPENBLAS_CORETYPE": openblas,  # numpy's and scipy's BLAS
        "NPY_DISABLE_CPU_FEATURES": numpy_off,
    }


# setting -> environment. `native` is what `make test` runs: every instruction the processor
# has, torch's default thread count (one per core).
SETTINGS: dict[str, dict[str, str]] = {
    "native": {},
    "threads1": {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
    "threads2": {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"},
    "avx2": _forced("avx2", "AVX2", "AVX2", "Haswell", "X86_V4 AVX512_ICL AVX512_SPR"),
    "avx": _forced("default", "AVX", "AVX", "Sandybridge", _NUMPY_ABOVE_AVX),
    "sse4.2": _forced("default", "SSE4_2", "SSE41", "Nehalem", _NUMPY_ABOVE_AVX),
}

# x86-64 levels of the kernels' clones, with the /proc/cpuinfo flags each one needs.
_LEVELS = {
    "x86-64-v4": ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"),
    "x86-64-v3": ("avx2", "bmi1", "bmi2", "f16c", "fma", "movbe", "abm"),
    "x86-64": (),
}

# Fails unless both libraries build and load under this environment's CC, without a warning.
_BUILDS = """
import warnings
warnings.simplefilter("error")
from model_explorer import native
for name in ("fake_quantize", "block_sparse"):
    assert native.library(name, name, "the torch path") is not None
"""


def instruction_levels() -> tuple[dict[str, dict[str, str]], list[str]]:
    """The kernels' instruction levels as settings (a CC that builds one version for that
    level), and the levels left out with why: the processor lacks them, or the kernels hold
    one version only (not x86-64, or a compiler other than GCC: its clones are GCC's)."""
    import platform
    import shlex
    import shutil

    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or "cc"
    version = subprocess.run(
        [*shlex.split(compiler), "--version"], capture_output=True, text=True, check=False
    ).stdout
    if platform.machine() not in ("x86_64", "AMD64") or "Free Software Foundation" not in version:
        return {}, [f"all (one version only: {platform.machine()}, {version.splitlines()[:1]})"]
    cpuinfo = Path("/proc/cpuinfo")
    flags = set()
    if cpuinfo.exists():
        found = [line for line in cpuinfo.read_text().splitlines() if line.startswith("flags")]
        flags = set(found[0].split(":", 1)[1].split()) if found else set()
    settings, left_out = {}, []
    for level, needs in _LEVELS.items():
        missing = [flag for flag in needs if flag not in flags]
        if missing:
            left_out.append(f"{level} (this processor lacks {', '.join(missing)})")
        else:
            settings[level] = {"CC": f"{compiler} -DNO_CLONES -march={level}"}
    return settings, left_out


_PROBE = """
import numpy, torch
from numpy._core._multiarray_umath import __cpu_features__ as features
vector = [name for name in ("X86_V4", "X86_V3", "X86_V2") if features.get(name)]
print(f"torch {torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads; "
      f"numpy up to {vector[0] if vector else 'baseline'}")
"""


def describe(environment: dict[str, str], python: str = sys.executable) -> str:
    """What torch and numpy report under `environment` (a variable they ignore shows here)."""
    done = subprocess.run(
        [python, "-c", _PROBE],
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    return (done.stdout or done.stderr).strip().splitlines()[-1]


def failures(report: Path) -> tuple[dict[str, int], list[str]]:
    """Counts and failed test ids of a JUnit XML report."""
    root = ElementTree.parse(report).getroot()
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    failed = []
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            counts["failed"] += 1
            failed.append(name)
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts, failed


def run_setting(
    name: str, pytest_args: list[str], folder: Path, python: str = sys.executable
) -> tuple[dict, list[str], float]:
    # torch.compile's cache of generated kernels is keyed without ATEN_CPU_CAPABILITY: shared
    # between settings it hands AVX-512 kernels to an AVX2 run (wrong results) or a run without
    # vector extensions (compile errors). Each setting gets its own, as a fresh machine has.
    cache = folder / f"inductor-{name}"
    environment = {**os.environ, **SETTINGS[name], "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    print(f"== {name}: {describe(environment, python)}", flush=True)
    report = folder / f"{name}.xml"
    start = time.monotonic()
    if "CC" in SETTINGS[name]:  # an instruction level: its kernels must build, or it tests nothing
        built = subprocess.run(
            [python, "-c", _BUILDS], env=environment, capture_output=True, text=True
        )
        if built.returncode != 0:
            failed = [f"(the kernels did not build: {built.stderr.strip()[-300:]})"]
            return {"passed": 0, "failed": 1, "skipped": 0}, failed, 0.0
    subprocess.run(
        [
            python,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--junitxml",
            str(report),
            *pytest_args,
        ],
        cwd=REPOSITORY,
        env=environment,
        check=False,
    )
    minutes = (time.monotonic() - start) / 60
    if not report.exists():
        return {"passed": 0, "failed": 0, "skipped": 0}, ["(pytest wrote no report)"], minutes
    counts, failed = failures(report)
    return counts, failed, minutes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--settings",
        default=",".join(SETTINGS),
        help=f"comma-separated, of {', '.join(SETTINGS)} (default: all)",
    )
    parser.add_argument(
        "--levels",
        action="store_true",
        help="once per instruction level of the C kernels this processor runs, not --settings",
    )
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="the interpreter whose environment runs the tests (default: this one)",
    )
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)
    names = [name for name in args.settings.split(",") if name]
    if args.levels:
        levels, left_out = instruction_levels()
        SETTINGS.update(levels)
        names = list(levels)
        for level in left_out:
            print(f"left out: {level}")
    unknown = [name for name in names if name not in SETTINGS]
    if unknown:
        print(f"unknown setting {', '.join(unknown)}; choose from {', '.join(SETTINGS)}")
        return 2
    summary = []
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            run = run_setting(name, args.pytest_args, Path(folder), args.python)
            summary.append((name, *run))
    print("\nsetting    passed failed skipped minutes")
    for name, counts, _, minutes in summary:
        print(
            f"{name:<10} {counts['passed']:>6} {counts['failed']:>6} {counts['skipped']:>7} "
            f"{minutes:>7.1f}"
        )
    for name, _, failed, _ in summary:
        for test in failed:
            print(f"FAILED under {name}: {test}")
    return 1 if any(failed for _, _, failed, _ in summary) else 0


if __name__ == "__main__":
    sys.exit(main())
