"""C kernels, built once per machine by the system's C compiler and loaded with ctypes.

The sources are this package's `*.c` files. `library(name)` compiles `name.c` (`$CC`, which may
hold arguments, else `cc` or `gcc`) into a shared library in this user's cache directory
(`MODEL_EXPLORER_KERNEL_DIR` elsewhere), named by a hash of its source, flags and compiler, so
that a second process, or the next run, loads it without compiling. cache.py decides where, and
refuses a directory or a library that anyone but this user could have prepared; one process
builds while the others wait. A ctypes call releases the GIL, so `in_threads` splits work
across torch's threads. Where no C compiler works or the cache is refused, one warning per
library says so and its callers take their torch path: the same values, slower.
`MODEL_EXPLORER_COMPILE=0` turns the kernels off.

On x86-64 with GCC each library holds one version per instruction level (x86-64-v4, v3 and the
baseline), chosen when it is loaded (`target_clones` in the sources). `-ffp-contract=off` keeps
the compiler from fusing a multiply and an add into one rounding (FMA) in the levels that have
it, so every level computes what the eager steps compute (tests/across_kernels.py --levels).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from torch.overrides import has_torch_function
from torch.utils._python_dispatch import is_in_torch_dispatch_mode

from model_explorer.native import cache

ENVIRONMENT_SWITCH = "MODEL_EXPLORER_COMPILE"
FLAGS = ("-O3", "-fno-math-errno", "-ffp-contract=off", "-shared", "-fPIC")

# Each library loaded, by name, or None once building or loading it failed (never tried again).
_libraries: dict[str, ctypes.CDLL | None] = {}
_pools: dict[int, ThreadPoolExecutor] = {}


def unwatched(x: torch.Tensor) -> bool:
    """Whether nothing records or transforms the operations on `x` now: no TorchFunctionMode
    and no `__torch_function__` of its own (torch.overrides.has_torch_function), no dispatch
    mode (the tracer, the interceptor, fake tensors), no torch.compile or export tracing and
    no TorchScript trace, any of which would see a kernel's result as a constant, and no
    torch.func transform (vmap, grad), whose tensors have no memory of their own to hand a
    kernel. They all see the eager steps instead. Only torch's public functions decide."""
    if (
        has_torch_function((x,))
        or is_in_torch_dispatch_mode()
        or torch.compiler.is_compiling()
        or torch.jit.is_tracing()
    ):
        return False
    try:
        x.data_ptr()  # a torch.func transform's tensor has none: RuntimeError
    except RuntimeError:
        return False
    return True


def enabled() -> bool:
    """False where the environment turned the kernels (and compiled passes) off."""
    # Asked before every kernel call: `os.environ.get` of an unset variable raises and catches
    # a KeyError inside (2 us a call on a slow machine), so its mapping is read directly.
    data = getattr(os.environ, "_data", None)
    if data is None:
        return os.environ.get(ENVIRONMENT_SWITCH, "1") != "0"
    return data.get(_SWITCH_KEY) != _OFF


_SWITCH_KEY, _OFF = os.environ.encodekey(ENVIRONMENT_SWITCH), os.environ.encodevalue("0")


def library(name: str, what: str, fallback: str) -> ctypes.CDLL | None:
    """The library built from `name`.c, compiled and loaded once per process; None where
    that failed, said once in a warning naming `what` failed and the `fallback` taken."""
    if name in _libraries:
        return _libraries[name]
    try:
        compiler = _compiler()
        if compiler is None or sys.platform == "win32":
            raise RuntimeError("no C compiler found (set CC to one)")
        loaded = cache.open_library(_build(compiler, Path(__file__).with_name(f"{name}.c")))
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
        loaded = None
        warnings.warn(
            f"the {what} could not be built ({error}); {fallback} instead: the same "
            f"results, slower (set {ENVIRONMENT_SWITCH}=0 to skip the attempt)",
            RuntimeWarning,
            stacklevel=3,
        )
    _libraries[name] = loaded
    return loaded


def function(
    name: str, symbol: str, argtypes: list[Any], what: str, fallback: str
) -> Callable[..., int] | None:
    """The C function `symbol` of library `name`, its argument types set once and an int
    returned; None where the library could not be built (`library`)."""
    built = library(name, what, fallback)
    if built is None:
        return None
    found = getattr(built, symbol)
    if not found.argtypes:
        found.argtypes, found.restype = argtypes, ctypes.c_int
    return found


def _compiler() -> list[str] | None:
    chosen = os.environ.get("CC")
    if chosen:
        return shlex.split(chosen)
    found = shutil.which("cc") or shutil.which("gcc")
    return None if found is None else [found]


def library_path(compiler: list[str], source: Path) -> Path:
    """Where the library for this source, flags and compiler is kept, named by their hash, in
    a directory cache.py accepts (made where missing)."""
    version = subprocess.run(
        [*compiler, "--version"], capture_output=True, text=True, check=False, timeout=60
    ).stdout
    key = hashlib.sha256(b"\0".join([source.read_bytes(), " ".join(FLAGS).encode()]))
    key.update(version.encode())
    key.update(" ".join(compiler).encode())  # CC's own arguments (-march, a sanitizer) too
    folder = cache.private_directory(cache.directory())
    return folder / f"{source.stem}_{key.hexdigest()[:16]}.so"


def _build(compiler: list[str], source: Path) -> Path:
    """The library for this source, flags and compiler (`library_path`), compiled once, under
    a lock (a copy is written under its own name, then renamed)."""
    built = library_path(compiler, source)
    folder = built.parent
    if built.exists():
        return built
    with cache.build_lock(folder, built.stem):
        if built.exists():  # built by the process that held the lock
            return built
        partial = built.with_suffix(f".{os.getpid()}.tmp")
        errors = []
        for extra in ((), ("-DNO_CLONES",)):  # a compiler without x86-64-v4 clones: one version
            command = [*compiler, *FLAGS, *extra, "-o", str(partial), str(source)]
            done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
            if done.returncode == 0:
                os.chmod(partial, 0o700)  # whatever the umask: nobody else writes it
                os.replace(partial, built)
                return built
            lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
            errors.append(next((line for line in lines if "error" in line), lines[-1]).strip())
        partial.unlink(missing_ok=True)
    raise RuntimeError(f"{' '.join(compiler)} failed: {errors[-1]}")


def in_threads(function: Callable[..., int], calls: Sequence[tuple[Any, ...]], what: str) -> None:
    """`function(*call)` for every call, on as many threads (each call a range of the work;
    a ctypes call releases the GIL); MemoryError where one returned nonzero (its buffers)."""
    if len(calls) == 1:
        codes = [function(*calls[0])]
    else:
        threads = len(calls)
        pool = _pools.get(threads) or _pools.setdefault(threads, ThreadPoolExecutor(threads))
        codes = list(pool.map(lambda call: function(*call), calls))
    if any(code != 0 for code in codes):
        raise MemoryError(f"the {what} could not allocate its buffers")


def ranges(n: int, smallest: int = 1) -> list[tuple[int, int]]:
    """[0, n) in as many ranges as torch has threads, none shorter than `smallest`."""
    threads = max(1, min(torch.get_num_threads(), n // max(smallest, 1)))
    bounds = [n * i // threads for i in range(threads + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(threads)]
