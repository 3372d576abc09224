"""The process's allocator set for a search: many forward passes allocating the same large
tensors over and over.

glibc hands an allocation above its mmap threshold (128 KiB, raised as large blocks are freed, to
32 MiB at most) straight from the kernel and gives it back when it is freed, so every activation
of a real network is fresh memory that the kernel zeroes page by page on first touch: on 2 cores
an EfficientNet-Lite0 forward over 128 photographs spent more than half its time in those page
faults (5.2 s, 2.2 s with freed memory kept; docs/performance-candidates.md). Raising the mmap
and trim thresholds keeps freed blocks in the heap for the next pass, and the heap is never
trimmed: a trim threshold, however high, is crossed at the end of every pass whose peak exceeds
it (a threshold of 1 GiB left an EfficientNet-Lite0 pass over 128 photographs taking 574,000 page
faults, 2.2 GB of fresh pages, and 1.7 times as long as with none). The cost: the process holds
on to its peak memory until it exits, which a search process does anyway.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys

log = logging.getLogger(__name__)

# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# Blocks up to this size come from the heap and stay there when freed.
KEPT = 1 << 30
# mallopt's "never trim the heap" (a trim threshold of -1, as glibc's manual documents it).
NEVER = -1
# What a user sets for glibc itself wins (GLIBC_TUNABLES' glibc.malloc.* or these variables).
USERS_OWN = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Keep freed blocks up to 1 GiB in the heap instead of returning them to the kernel, and
    never trim the heap (glibc's `mallopt` of the mmap and trim thresholds), once per process;
    on Linux with glibc only, and not where the user set glibc's own malloc settings. Returns
    whether it is in effect."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if any(name in os.environ for name in USERS_OWN) or "glibc.malloc." in tunables:
        return False
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and other C libraries have no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _applied = bool(mallopt(M_TRIM_THRESHOLD, NEVER)) and bool(mallopt(M_MMAP_THRESHOLD, KEPT))
    log.debug("freed memory kept in the heap: %s", _applied)
    return _applied
