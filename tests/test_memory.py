"""The allocator setting of a search process (memory.keep_freed_memory): large tensors freed
and allocated again, pass after pass, come back from the heap without the kernel's page faults,
counted by the kernel itself (getrusage's minor faults); a user's own glibc settings are left
alone. Each case
runs in a fresh interpreter, since the setting is the process's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")

PROBE = """
import ctypes, json, resource, sys
from model_explorer.memory import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else False
faults = []
if sys.argv[2] == "layer":
    import torch
    x = torch.ones(8, 16, 256, 256)  # 32 MiB
    for _ in range(12):  # a layer's temporaries, pass after pass
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        y = x * 2.0
        z = y + 1.0
        del y, z
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
else:  # a network's activations as the allocator sees them: 1.5 GiB alive at the pass's peak
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        blocks = [libc.malloc(128 << 20) for _ in range(12)]
        for block in blocks:
            libc.memset(block, 1, 128 << 20)
        for block in blocks:
            libc.free(block)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"applied": applied, "faults": faults}))
"""


def probe(mode: str, work: str = "layer", **environment: str) -> dict:
    env = {**os.environ, **environment}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode, work],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_freed_large_tensors_come_back_without_page_faults() -> None:
    """Two 32 MiB temporaries a pass are 16,384 fresh pages of 4 KiB each pass by default; kept,
    the heap settles and then takes none in nearly every pass. glibc's bins grow once more now
    and then, even late (8,192 faults, one temporary's pages, in one of the last passes in
    some runs), so the test asks that most of the last eight passes take none and that
    together they take a fraction of what the default takes in every one of them."""
    kept = probe("keep")
    assert kept["applied"] is True
    last = sorted(kept["faults"][-8:])
    assert last[5] < 300, kept  # at least six of the last eight passes take (almost) none
    assert sum(last) < 2 * 16384, kept  # the default: 8 x 16,384
    returned = probe("default")
    assert min(returned["faults"][-3:]) > 8000, returned


def test_a_pass_whose_peak_exceeds_a_gigabyte_comes_back_without_page_faults() -> None:
    """The heap is never trimmed: a pass whose blocks together exceed a trim threshold frees
    them all at its end, and the threshold this had (1 GiB) handed them back to the kernel every
    time, 393,184 fresh pages a pass here (the blocks are glibc's own, allocated and freed with
    nothing between them, so the heap's layout is the same in every run). Kept, the passes
    after the first take none."""
    kept = probe("keep", "network")
    assert kept["faults"][0] > 300_000, kept  # the first pass takes its 393,216 pages
    assert max(kept["faults"][1:]) < 2_000, kept
    returned = probe("default", "network")
    assert min(returned["faults"]) > 300_000, returned


def applied(**environment: str) -> bool:
    code = "from model_explorer.memory import keep_freed_memory; print(keep_freed_memory())"
    env = {**os.environ, **environment}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    return done.stdout.strip() == "True"


def test_a_users_own_glibc_setting_wins() -> None:
    assert applied()
    assert not applied(MALLOC_TRIM_THRESHOLD_="131072")
    assert not applied(GLIBC_TUNABLES="glibc.malloc.mmap_threshold=131072")
