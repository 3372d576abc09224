"""The C kernels' cache refuses what someone else could have prepared (native/cache.py): each
planted directory or library is refused in one warning naming it, the kernels' callers take the
torch path with the same values, and nothing planted is loaded. Planted as an attacker on a
shared machine would plant them: a directory open to others, a parent open to others without the
sticky bit, a link, a library file someone else may write or owns, and a library swapped for
another one after its check (the loader must still run the file that was checked)."""

from __future__ import annotations

import ctypes
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

from model_explorer import native
from model_explorer.formats import kernels
from model_explorer.native import cache

SOURCE = Path(native.__file__).with_name("fake_quantize.c")


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch):
    """No library loaded yet in this process, the kernels on."""
    monkeypatch.setattr(native, "_libraries", {})
    monkeypatch.setattr(kernels, "_functions", {})
    monkeypatch.setenv(native.ENVIRONMENT_SWITCH, "1")
    return monkeypatch


def quantized(x: torch.Tensor) -> torch.Tensor:
    """4-bit fake quantization, by the kernel where it was loaded, else by the eager steps."""
    multiplier, divisor = torch.tensor([7 / 2.5]), torch.tensor([7 / 2.5])
    done = kernels.native_integer(x, multiplier, -8, 7, divisor, None)
    return done if done is not None else (x * multiplier).round().clamp(-8, 7).div(divisor)


def refused(monkeypatch: pytest.MonkeyPatch, folder: Path, says: str) -> None:
    """The kernel directory `folder` is refused in one warning that says `says` and names a
    path, and the torch path gives the eager steps' values."""
    monkeypatch.setenv(cache.DIRECTORY_VARIABLE, str(folder))
    x = torch.randn(64, 33)
    with pytest.warns(RuntimeWarning) as caught:
        assert kernels._function("integer") is None
    [warning] = [w for w in caught if "kernel could not be built" in str(w.message)]
    message = str(warning.message)
    assert says in message and message.count(". ") == 0, message
    assert any(str(p) in message for p in (folder, *folder.parents)), message
    expected = (x * (7 / 2.5)).round().clamp(-8, 7).div(7 / 2.5)
    torch.testing.assert_close(quantized(x), expected, rtol=0, atol=0)


def expected_library(folder: Path, content: bytes = b"not a library") -> Path:
    """A file planted where the library of this source, flags and compiler would be kept in
    `folder`, under the name it would be loaded by."""
    planted = native.library_path(native._compiler(), SOURCE)
    assert planted.parent == folder
    planted.write_bytes(content)
    return planted


def test_the_default_directory_is_the_users_cache_not_the_temporary_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(cache.DIRECTORY_VARIABLE, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert cache.directory() == tmp_path / "cache" / "model_explorer" / "kernels"
    made = cache.private_directory(cache.directory())
    for folder in (made, made.parent, made.parent.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


def test_a_directory_open_to_others_is_refused(fresh, tmp_path: Path) -> None:
    folder = tmp_path / "kernels"
    folder.mkdir()
    folder.chmod(0o777)
    refused(fresh, folder, "writable by other users (mode 0o777)")
    assert not list(folder.iterdir())  # nothing built there


def test_a_parent_open_to_others_without_the_sticky_bit_is_refused(fresh, tmp_path: Path) -> None:
    """Someone who may write the parent may rename this user's directory away and put theirs
    in its place; with the sticky bit (as /tmp has) they may not."""
    shared = tmp_path / "shared"
    (shared / "mine").mkdir(parents=True)
    (shared / "mine").chmod(0o700)
    shared.chmod(0o777)
    refused(fresh, shared / "mine" / "kernels", f"{shared} is writable by other users")
    shared.chmod(0o777 | stat.S_ISVTX)
    assert cache.private_directory(shared / "mine" / "kernels").is_dir()


@pytest.mark.parametrize("where", ["directory", "parent"])
def test_what_its_group_may_write_is_refused_as_what_everyone_may(
    fresh, tmp_path: Path, where: str
) -> None:
    """Write access for the group alone is write access for others: a directory, or a parent
    without the sticky bit, at mode g+w is refused as at o+w (a library file: below)."""
    folder = tmp_path / "shared" / "kernels"
    folder.parent.mkdir(mode=0o755)
    if where == "directory":
        folder.mkdir(mode=0o700)
        folder.chmod(0o770)
        refused(fresh, folder, f"{folder} is writable by other users (mode 0o770)")
    else:
        folder.parent.chmod(0o775)
        refused(fresh, folder, f"{folder.parent} is writable by other users (mode 0o775)")


@pytest.mark.skipif(not hasattr(os, "chown") or os.geteuid() != 0, reason="needs root to chown")
def test_a_library_root_owns_is_refused_to_another_user(fresh, tmp_path: Path) -> None:
    """Root may own the folders above the cache, never the library another user loads: only
    this user's own build is run (as this user, uid 1000, in a folder of theirs)."""
    folder = tmp_path / "kernels"
    fresh.setenv(cache.DIRECTORY_VARIABLE, str(folder))
    library = expected_library(folder)  # made by root
    os.chown(folder, 1000, 1000)
    fresh.setattr(os, "getuid", lambda: 1000)
    refused(fresh, folder, f"{library} belongs to another user (uid 0)")


def test_a_directory_of_another_user_is_refused(fresh, tmp_path: Path) -> None:
    folder = tmp_path / "kernels"
    folder.mkdir(mode=0o700)
    fresh.setattr(os, "getuid", lambda: folder.stat().st_uid + 1)
    refused(fresh, folder, "belongs to another user")


def test_a_link_on_the_way_is_followed_once_and_its_target_checked(fresh, tmp_path: Path) -> None:
    """A link named in MODEL_EXPLORER_KERNEL_DIR is resolved when the directory is chosen: its
    target is what is checked and used (a link its owner could point elsewhere later is not
    read again)."""
    target = tmp_path / "target"
    target.mkdir(mode=0o777)
    target.chmod(0o777)
    (tmp_path / "link").symlink_to(target)
    refused(fresh, tmp_path / "link", f"{target} is writable by other users")


@pytest.mark.parametrize("mode", [0o777, 0o660])  # everyone, or the group alone
def test_a_library_someone_else_may_write_is_refused_and_not_loaded(
    fresh, tmp_path: Path, mode: int
) -> None:
    folder = tmp_path / "kernels"
    fresh.setenv(cache.DIRECTORY_VARIABLE, str(folder))
    library = expected_library(folder)
    library.chmod(mode)
    refused(fresh, folder, f"is writable by other users (mode {mode:#o})")


@pytest.mark.skipif(not hasattr(os, "chown") or os.geteuid() != 0, reason="needs root to chown")
def test_a_library_another_user_owns_is_refused_and_not_loaded(fresh, tmp_path: Path) -> None:
    folder = tmp_path / "kernels"
    fresh.setenv(cache.DIRECTORY_VARIABLE, str(folder))
    library = expected_library(folder)
    os.chown(library, 65534, 65534)
    refused(fresh, folder, "belongs to another user (uid 65534)")


def test_a_planted_library_is_never_run(fresh, tmp_path: Path) -> None:
    """A library under the expected name that would write a file when loaded (its
    constructor): refused while its mode lets others write it, and the file never appears."""
    folder = tmp_path / "kernels"
    fresh.setenv(cache.DIRECTORY_VARIABLE, str(folder))
    library = expected_library(folder)
    witness = tmp_path / "ran"
    planted = tmp_path / "planted.c"
    planted.write_text(
        "#include <stdio.h>\n__attribute__((constructor)) static void run(void) "
        f'{{ FILE *f = fopen("{witness}", "w"); if (f) fclose(f); }}\n'
    )
    built = subprocess.run(
        [*native._compiler(), "-shared", "-fPIC", "-o", str(library), str(planted)]
    )
    assert built.returncode == 0
    library.chmod(0o666)
    refused(fresh, folder, "writable by other users")
    assert not witness.exists()


def test_the_file_checked_is_the_file_loaded(tmp_path: Path) -> None:
    """open_library loads through the descriptor it checked: a library renamed over the
    checked one between the check and the load is not the one run."""
    first, second = tmp_path / "first.c", tmp_path / "second.c"
    for source, value in ((first, 1), (second, 2)):
        source.write_text(f"int which(void) {{ return {value}; }}\n")
        library = source.with_suffix(".so")
        subprocess.run([*native._compiler(), "-shared", "-fPIC", "-o", str(library), str(source)])
        library.chmod(0o700)
    target = tmp_path / "library.so"
    os.link(tmp_path / "first.so", target)
    opened = os.open
    swapped = []

    def open_then_swap(path, *arguments, **options):  # noqa: ANN001, ANN002, ANN003
        descriptor = opened(path, *arguments, **options)
        if Path(path) == target and not swapped:
            os.replace(tmp_path / "second.so", target)
            swapped.append(True)
        return descriptor

    if not os.path.exists("/proc/self/fd"):
        pytest.skip("loading through the descriptor needs /proc/self/fd")
    cache_open = cache.os.open
    try:
        cache.os.open = open_then_swap
        loaded = cache.open_library(target)
    finally:
        cache.os.open = cache_open
    assert swapped and loaded.which() == 1
    assert ctypes.CDLL(str(target)).which() == 2  # what the path held by then


def test_workers_starting_at_once_build_once(tmp_path: Path) -> None:
    """Three processes asking for the library at once in an empty directory: one compiles,
    the others wait for its lock and load what it built (the compiler's calls counted by a
    script in front of it)."""
    calls = tmp_path / "calls"
    compiler = native._compiler()
    front = tmp_path / "cc"
    front.write_text(f'#!/bin/sh\necho x >> "{calls}"\nexec {" ".join(compiler)} "$@"\n')
    front.chmod(0o755)
    script = textwrap.dedent(
        """
        import warnings
        warnings.simplefilter("error")
        from model_explorer.formats import kernels
        assert kernels._function("integer") is not None
        """
    )
    env = {**os.environ, "CC": str(front), cache.DIRECTORY_VARIABLE: str(tmp_path / "kernels")}
    env[native.ENVIRONMENT_SWITCH] = "1"
    workers = [
        subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.PIPE)
        for _ in range(3)
    ]
    for worker in workers:
        assert worker.wait(timeout=600) == 0, worker.stderr.read().decode()[-2000:]
    compiles = len(calls.read_text().splitlines())
    # one `--version` per process, one compilation in all
    assert compiles == 3 + 1, compiles
    [library] = (tmp_path / "kernels").glob("*.so")
    assert stat.S_IMODE(library.stat().st_mode) & 0o077 == 0


def test_a_library_loaded_from_the_cache_has_the_eager_values(fresh) -> None:
    """The checks let this user's own library through: built (or found built by the rest of
    the suite) in the default directory, loaded, used."""
    fresh.delenv(cache.DIRECTORY_VARIABLE, raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert kernels._function("integer") is not None
    x = torch.randn(64, 33)
    expected = (x * (7 / 2.5)).round().clamp(-8, 7).div(7 / 2.5)
    torch.testing.assert_close(quantized(x), expected, rtol=0, atol=0)


@pytest.mark.skipif(
    shutil.which("objdump") is None or platform.machine() != "x86_64",
    reason="reads x86-64 instructions with binutils' objdump",
)
@pytest.mark.parametrize("name", ["fake_quantize", "block_sparse"])
def test_no_instruction_level_fuses_a_multiply_and_an_add(fresh, name: str) -> None:
    """The libraries are compiled with -ffp-contract=off: none of their versions (x86-64-v4
    and v3 have FMA) holds a fused multiply-add, which rounds once where the eager steps round
    twice (without the flag GCC 12 put 31 of them in block_sparse's v3 version, 16 in v4's)."""
    fresh.delenv(cache.DIRECTORY_VARIABLE, raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert native.library(name, name, "the torch path") is not None
    built = native.library_path(native._compiler(), SOURCE.with_name(f"{name}.c"))
    listing = subprocess.run(
        ["objdump", "-d", str(built)], capture_output=True, text=True, check=True
    ).stdout
    assert len(listing) > 10_000  # the library was read
    fused = [line for line in listing.splitlines() if re.search(r"\tv?f(n)?m(add|sub)", line)]
    assert not fused, fused[:5]
