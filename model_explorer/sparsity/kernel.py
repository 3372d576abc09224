"""The fused block-sparse kernel (block_sparse.c): a layer's block statistics and its product
with the kept blocks in one pass over its input, without the im2col matrix.

The torch path (sparsifier.py) copies each layer's im2col matrix out of its input, zeroes the
dropped blocks and multiplies: the copy alone took about as long as the layer's own
convolution, and the statistics as long again. The kernel copies a few samples at a time into
a buffer with their padding, takes every block's mean from sums of windows along its rows, and
multiplies only the kept blocks' columns with the weights, reading the buffer in place
(block_sparse.c says how).

It is C, compiled once per machine by the system's C compiler (`$CC`, else `cc`) into a
shared library kept in the temporary directory (`MODEL_EXPLORER_KERNEL_DIR` elsewhere), named
by a hash of its source, flags and compiler, and loaded with ctypes; a call releases the GIL,
so the batch is split across torch's threads. It takes float32 CPU tensors of convolutions
(Conv1d, Conv2d) and Linear layers, where no gradient is wanted and nothing
watches the operations (no TorchFunctionMode, dispatch mode, compile or export). Where no C
compiler works, one warning says so and the torch path runs: the same blocks, slower.
`MODEL_EXPLORER_COMPILE=0` turns it off, as it does the compiled fake-quantization passes.
"""

from __future__ import annotations

import ctypes
import getpass
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import _get_current_dispatch_mode

from model_explorer.formats.compiled import ENVIRONMENT_SWITCH

SOURCE = Path(__file__).with_name("block_sparse.c")
FLAGS = ("-O3", "-fno-math-errno", "-shared", "-fPIC")

_FIELDS = (
    "channels height width sn sc sh sw kh kw stride_y stride_x dil_y dil_x pad_y pad_x "
    "out_h out_w cout groups bw bh on oc ol"
).split()


class _Geometry(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int64) for name in _FIELDS]


# The loaded library, or "failed" once compiling or loading it failed (then never tried again).
_library: dict[str, Any] = {}
_pool: dict[int, ThreadPoolExecutor] = {}


def available() -> bool:
    """Whether the kernel may run: not turned off, and not failed to build."""
    return os.environ.get(ENVIRONMENT_SWITCH, "1") != "0" and "failed" not in _library


def applies(layer: nn.Module, x: Tensor, weight: Tensor) -> bool:
    """Whether the kernel takes `layer` on `x`: float32 on the CPU, no gradient wanted,
    nothing watching the operations."""
    if isinstance(layer, nn.Linear):
        shaped = x.dim() >= 2
    elif isinstance(layer, (nn.Conv1d, nn.Conv2d)):
        shaped = x.dim() == (3 if isinstance(layer, nn.Conv1d) else 4)
    else:
        return False
    wants_gradient = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)
    return (
        shaped
        and x.dtype == torch.float32
        and weight.dtype == torch.float32
        and x.device.type == "cpu"
        and weight.device.type == "cpu"
        and not wants_gradient
        and available()
        and not torch._C._is_torch_function_mode_enabled()
        and _get_current_dispatch_mode() is None
        and not torch.compiler.is_compiling()
        and type(x) is Tensor
        and _load() is not None
    )


def _compiler() -> list[str] | None:
    """The C compiler's command: `$CC` (which may hold arguments, as "ccache gcc" does), else
    `cc` or `gcc` on the PATH."""
    chosen = os.environ.get("CC")
    if chosen:
        return shlex.split(chosen)
    found = shutil.which("cc") or shutil.which("gcc")
    return None if found is None else [found]


def _build(compiler: list[str], directory: Path) -> Path:
    """The library for this source, flags and compiler, compiled once into `directory` (a
    second process finds it there; a copy is written under its own name, then renamed). A
    directory another user owns is refused: a library planted there would be loaded."""
    version = subprocess.run(
        [*compiler, "--version"], capture_output=True, text=True, check=False, timeout=60
    ).stdout
    source = SOURCE.read_bytes()
    key = hashlib.sha256(b"\0".join([source, " ".join(FLAGS).encode(), version.encode()]))
    library = directory / f"block_sparse_{key.hexdigest()[:16]}.so"
    directory.mkdir(parents=True, exist_ok=True)
    if hasattr(os, "getuid") and directory.stat().st_uid != os.getuid():
        raise RuntimeError(f"{directory} belongs to another user (set MODEL_EXPLORER_KERNEL_DIR)")
    if library.exists():
        return library
    partial = library.with_suffix(f".{os.getpid()}.tmp")
    errors = []
    for extra in ((), ("-DNO_CLONES",)):  # a compiler without x86-64-v4 clones: one version
        command = [*compiler, *FLAGS, *extra, "-o", str(partial), str(SOURCE)]
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
        if done.returncode == 0:
            os.replace(partial, library)
            return library
        lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        errors.append(next((line for line in lines if "error" in line), lines[-1]).strip())
    partial.unlink(missing_ok=True)
    raise RuntimeError(f"{' '.join(compiler)} failed: {errors[-1]}")


def _directory() -> Path:
    chosen = os.environ.get("MODEL_EXPLORER_KERNEL_DIR")
    if chosen:
        return Path(chosen)
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this user id (a container's)
        user = str(os.getuid())
    return Path(tempfile.gettempdir()) / f"model_explorer_{user}" / "kernels"


def _load() -> Any:
    """The library's function, compiled and loaded once per process; None where that failed
    (said once)."""
    if "function" in _library or "failed" in _library:
        return _library.get("function")
    try:
        compiler = _compiler()
        if compiler is None or sys.platform == "win32":
            raise RuntimeError("no C compiler found (set CC to one)")
        function = ctypes.CDLL(str(_build(compiler, _directory()))).block_sparse
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
        _library["failed"] = True
        warnings.warn(
            f"the fused block-sparsity kernel could not be built ({error}); the layers run "
            f"the torch path instead: the same blocks, slower (set {ENVIRONMENT_SWITCH}=0 to "
            f"skip the attempt)",
            RuntimeWarning,
            stacklevel=4,
        )
        return None
    pointer, size = ctypes.c_void_p, ctypes.c_int64
    function.argtypes = [pointer, ctypes.POINTER(_Geometry), pointer, pointer, ctypes.c_float]
    function.argtypes += [ctypes.c_int, size, size, pointer, pointer, pointer]
    function.restype = ctypes.c_int
    _library["function"] = function
    return function


def transposed(layer: nn.Module, weight: Tensor, kept: dict[str, Any]) -> Tensor:
    """`weight` as the kernel reads it, (groups, columns, a group's output channels): the copy
    in `kept` while it is of the same weights, unchanged (an inference tensor has no version
    to tell, so its copy is made anew each time)."""
    version = None if weight.is_inference() else (weight._version, tuple(weight.shape))
    if version is not None and kept.get("source") is weight and kept.get("version") == version:
        return kept["tensor"]
    groups = getattr(layer, "groups", 1)
    copy = weight.detach().reshape(groups, weight.shape[0] // groups, -1)
    copy = copy.transpose(1, 2).contiguous()
    kept.update(source=weight, version=version, tensor=copy)
    return copy


def _convolution(layer: nn.Module, x: Tensor, padding: tuple[int, ...]) -> tuple[Tensor, dict]:
    """A convolution's input as (N, C, H, W) and its geometry's fields (Conv1d as a
    convolution of height 1); `x` is padded already where its padding is not zeros."""
    kernel, stride, dilation = layer.kernel_size, layer.stride, layer.dilation
    if isinstance(layer, nn.Conv1d):
        x = x.unsqueeze(2)
        kernel, stride, dilation, padding = (
            (1, *kernel),
            (1, *stride),
            (1, *dilation),
            (0, *padding),
        )
    out = [
        (size + 2 * p - d * (k - 1) - 1) // s + 1
        for size, p, d, k, s in zip(x.shape[2:], padding, dilation, kernel, stride, strict=True)
    ]
    fields = dict(zip(("kh", "kw"), kernel, strict=True))
    fields.update(stride_y=stride[0], stride_x=stride[1], dil_y=dilation[0], dil_x=dilation[1])
    fields.update(pad_y=padding[0], pad_x=padding[1], out_h=out[0], out_w=out[1])
    return x, fields


def run(
    layer: nn.Module,
    x: Tensor,
    padding: tuple[int, ...],
    transposed: Tensor,
    block_size: tuple[int, int],
    threshold: float,
) -> tuple[Tensor | None, int, int, int]:
    """The layer's output from its kept blocks (None with a threshold of 0 or below, where
    nothing is dropped), and how many blocks there are, hold only zeros, and were dropped
    besides those. `x` is the layer's input (a convolution's padded where its padding is not
    zeros, `padding` the rest), `transposed` its weights as (groups, columns, a group's output
    channels)."""
    groups, columns, cout = transposed.shape
    n = x.shape[0]
    if isinstance(layer, nn.Linear):
        spatial = tuple(x.shape[1:-1])
        rows = x.reshape(n, -1, x.shape[-1])
        source = rows.transpose(1, 2).unsqueeze(2)  # (N, F, 1, L): a 1x1 convolution's input
        fields = dict(kh=1, kw=1, stride_y=1, stride_x=1, dil_y=1, dil_x=1, pad_y=0, pad_x=0)
        fields.update(out_h=1, out_w=rows.shape[1])
        out = x.new_empty(n, *spatial, cout)
        on, oc, ol = rows.shape[1] * cout, 1, cout
        channels = x.shape[-1]
    else:
        source, fields = _convolution(layer, x, padding)
        spatial = (fields["out_h"], fields["out_w"])
        if isinstance(layer, nn.Conv1d):
            spatial = spatial[1:]
        out = x.new_empty(n, groups * cout, *spatial)
        on, oc, ol = out[0].numel(), fields["out_h"] * fields["out_w"], 1
        channels = source.shape[1] // groups
    width, height = block_size
    geometry = _Geometry(
        channels,
        *source.shape[2:],
        *source.stride(),
        **fields,
        cout=cout,
        groups=groups,
        bw=width,
        bh=height,
        on=on,
        oc=oc,
        ol=ol,
    )
    rows_total = fields["out_h"] * fields["out_w"]
    means = x.new_empty(n, groups, -(-columns // width), -(-rows_total // height))
    bias = None if layer.bias is None else layer.bias.detach().contiguous()
    multiply = threshold > 0
    arguments = (source.data_ptr(), ctypes.byref(geometry), transposed.data_ptr())
    arguments += (None if bias is None else bias.data_ptr(), threshold, int(multiply))
    present, created = _in_threads(_load(), arguments, n, (means.data_ptr(), out.data_ptr()))
    return (out if multiply else None), means.numel(), present, created


def _in_threads(function: Any, arguments: tuple, n: int, outputs: tuple) -> tuple[int, int]:
    """`function` over the samples in as many ranges as torch has threads (a ctypes call
    releases the GIL), and the sums of their tallies; MemoryError where one ran out of
    memory."""
    threads = max(1, min(torch.get_num_threads(), n))
    bounds = [n * i // threads for i in range(threads + 1)]
    tallies = torch.zeros(threads, 2, dtype=torch.int64)
    calls = [
        (*arguments, bounds[i], bounds[i + 1], *outputs, tallies[i].data_ptr())
        for i in range(threads)
    ]
    if threads == 1:
        codes = [function(*calls[0])]
    else:
        pool = _pool.get(threads) or _pool.setdefault(threads, ThreadPoolExecutor(threads))
        codes = list(pool.map(lambda call: function(*call), calls))
    if any(code != 0 for code in codes):
        raise MemoryError("the block-sparsity kernel could not allocate its buffers")
    present, created = tallies.sum(0).tolist()
    return present, created
