"""Where the C kernels' libraries are kept, and what is checked before one is built or loaded.

A library is code this process runs, so it is only ever loaded from a place nobody else could
have prepared. The default place is this user's cache directory (`platformdirs`:
`~/.cache/model_explorer/kernels` on Linux, `~/Library/Caches/model_explorer/kernels` on macOS),
not the shared temporary directory; `MODEL_EXPLORER_KERNEL_DIR` names another. Each directory
this package makes there is made 0o700. Before a library is built or loaded:

- the directory, and every directory above it, is checked (`check_directory`): no symbolic link,
  each owned by this user or by root, none writable by anyone else unless it has the sticky bit
  (`/tmp`, where nobody may move another's entries), the directory itself this user's and
  writable by nobody else;
- the library file is opened once without following a link and checked on that open file
  (`open_library`): a regular file of this user's that nobody else may write; on Linux it is
  then loaded through that same open file (`/proc/self/fd/N`), so a file swapped after the check
  is not the one loaded;
- building takes an exclusive lock per library (`build_lock`), so that the workers of a pool or a
  cluster that start at once compile it once and the others wait and load it.

Anything refused raises UnsafeLocation, one sentence naming the path, what is wrong and what to
do; the kernels' callers then take their torch path (native.library warns once).
"""

from __future__ import annotations

import ctypes
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DIRECTORY_VARIABLE = "MODEL_EXPLORER_KERNEL_DIR"

# Open descriptors of the loaded libraries: a library loaded as /proc/self/fd/N keeps its N,
# since the dynamic loader knows a library by that name and would hand back the first one for
# a second library opened under a reused N.
_held: list[int] = []


class UnsafeLocation(RuntimeError):
    """A kernel directory or library that someone other than this user could have prepared."""


def directory() -> Path:
    """Where the libraries are kept: `MODEL_EXPLORER_KERNEL_DIR`, else `kernels` in this
    user's cache directory (platformdirs.user_cache_dir)."""
    chosen = os.environ.get(DIRECTORY_VARIABLE)
    if chosen:
        return Path(chosen).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("model_explorer", appauthor=False)) / "kernels"


def private_directory(folder: Path) -> Path:
    """`folder` as an absolute path without links, each missing directory made 0o700, checked
    (`check_directory`)."""
    folder = Path(os.path.realpath(folder))
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for made in reversed(missing):
        try:
            os.mkdir(made, 0o700)
        except FileExistsError:
            pass  # another process made it: checked below as any other
    folder = missing[0] if missing else folder
    check_directory(folder)
    return folder


def _advice(path: Path) -> str:
    return f"(set {DIRECTORY_VARIABLE} to a directory of your own, or fix {path})"


def check_directory(folder: Path) -> None:
    """UnsafeLocation unless nobody but this user (and root) can change what `folder` holds:
    see the module's docstring."""
    user = os.getuid()
    for path in (folder, *folder.parents):
        status = os.lstat(path)
        if stat.S_ISLNK(status.st_mode):
            raise UnsafeLocation(f"{path} is a symbolic link {_advice(path)}")
        if status.st_uid not in (user, 0) or (path == folder and status.st_uid != user):
            raise UnsafeLocation(
                f"{path} belongs to another user (uid {status.st_uid}) {_advice(path)}"
            )
        open_to_others = status.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if open_to_others and (path == folder or not status.st_mode & stat.S_ISVTX):
            raise UnsafeLocation(
                f"{path} is writable by other users (mode {stat.S_IMODE(status.st_mode):#o}), "
                f"who could replace a library in it {_advice(path)}"
            )


def open_library(path: Path) -> ctypes.CDLL:
    """The library at `path`, loaded from the very file checked to be a regular file of this
    user's that nobody else may write (UnsafeLocation otherwise; OSError where it cannot be
    opened or loaded)."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise UnsafeLocation(f"{path} is not a regular file {_advice(path)}")
        if status.st_uid != os.getuid():
            raise UnsafeLocation(
                f"{path} belongs to another user (uid {status.st_uid}); delete it "
                f"{_advice(path.parent)}"
            )
        if status.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise UnsafeLocation(
                f"{path} is writable by other users (mode {stat.S_IMODE(status.st_mode):#o}), "
                f"so it may not be the library this user built; delete it {_advice(path.parent)}"
            )
        through = f"/proc/self/fd/{descriptor}"
        loaded = ctypes.CDLL(through if os.path.exists(through) else str(path))
    except BaseException:
        os.close(descriptor)
        raise
    _held.append(descriptor)
    return loaded


@contextmanager
def build_lock(folder: Path, name: str) -> Iterator[None]:
    """An exclusive lock on `name` in `folder` while the block runs: one process builds a
    library, the others wait for it and then find it built."""
    import fcntl

    descriptor = os.open(
        folder / f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
    )
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # the lock goes with it
