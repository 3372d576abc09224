"""Atomic file writes: a reader never sees a half-written checkpoint, calibration or result file.

The temporary file sits beside the target, named after it and after the process writing it
(`.<name>.<host>-<pid>.<random>.tmp`): it is removed when the write fails or is interrupted,
and one left behind by a process that was killed is removed by the next write to the same
target. The file written gets the permissions of the user's umask, like any other file.
"""

from __future__ import annotations

import os
import re
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path


@cache
def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The permissions a newly created file gets under the user's umask."""
    return 0o666 & ~_umask()


def process_tag() -> str:
    """`<host>-<pid>`: which process on which machine wrote a temporary file."""
    return f"{socket.gethostname()}-{os.getpid()}"


def process_alive(host: str, pid: int) -> bool | None:
    """Whether process `pid` on `host` runs (None: another host, which cannot be asked)."""
    if host != socket.gethostname():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    return True


def remove_stale_temporaries(target: Path) -> list[Path]:
    """Remove the temporary files of writes to `target` whose process is gone."""
    removed = []
    pattern = re.compile(re.escape(f".{target.name}.") + r"(.+)-(\d+)\.[^.]+\.tmp")
    for candidate in target.parent.glob(f".{target.name}.*.tmp"):
        found = pattern.fullmatch(candidate.name)
        if found and process_alive(found.group(1), int(found.group(2))) is False:
            candidate.unlink(missing_ok=True)
            removed.append(candidate)
    return removed


def read_torch_file(path: Path, where: str, what: str) -> object:
    """`torch.load(weights_only=True)` of a file, or a UserError in one line naming the file,
    what it is not and why torch refused it (a pickled class, a truncated archive, not a torch
    file at all)."""
    import torch

    from model_explorer.errors import UserError

    with open(path, "rb") as file:
        start = file.read(2)
    if start not in (b"PK", b"\x80\x02"):  # a zip archive, or torch's legacy pickle
        from model_explorer.filekinds import kind_of

        kind = kind_of(path)
        content = (
            "it is empty"
            if not start
            else f"it is {kind}"
            if kind
            else "it is not a file written by torch.save"
        )
        raise UserError(f"{where}: '{path}' is not a readable {what} ({content})")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # pickle, zip and torch errors all mean "not readable"
        text = str(error)
        refused = re.search(r"Unsupported global: GLOBAL (\S+)", text)
        if refused:
            reason = f"it holds a pickled {refused.group(1)}, which is never loaded"
        else:
            first = text.strip().splitlines()[0].split(". ")[0] if text.strip() else ""
            reason = f"{type(error).__name__}{': ' + first if first else ''}"
        raise UserError(f"{where}: '{path}' is not a readable {what} ({reason})") from None


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside `path`; it replaces `path` only if the block succeeds."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(target)
    handle, temporary = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.{process_tag()}.", suffix=".tmp"
    )
    os.close(handle)
    try:
        yield Path(temporary)
        os.chmod(temporary, file_mode())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
