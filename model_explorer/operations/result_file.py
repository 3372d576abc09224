"""The result file of one exploration run: claimed (created exclusively) before the first
evaluation, so that an unwritable path fails at once and two runs never share or replace a
file; unfinished results tell a run still writing from one that stopped."""

from __future__ import annotations

import itertools
import logging
import os
import socket
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model_explorer.errors import UserError, WorkloadError
from model_explorer.fileio import process_alive
from model_explorer.quantization.spec import CalibrationSpec
from model_explorer.results import ExplorationResult
from model_explorer.workload.file import Workload

log = logging.getLogger(__name__)


def this_process() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid()}


def running_elsewhere(result: ExplorationResult) -> bool:
    """Whether another live process on this machine is still writing `result`."""
    owner = result.owner or {}
    if result.complete or owner == this_process() or "pid" not in owner:
        return False
    return bool(process_alive(str(owner.get("host")), int(owner["pid"])))


def hold(path: Path, where: str) -> Callable[[], None]:
    """An exclusive lock on the result file at `path` for this run (`<file>.lock` beside it,
    taken without waiting); the function that releases it. A second run writing or resuming
    the same file while this one runs is refused in one sentence (two `--resume` runs of one
    file both ran to the end, each over the other's saves)."""
    if sys.platform == "win32":
        return lambda: None
    import fcntl

    lock = path.with_name(path.name + ".lock")
    try:
        descriptor = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise _unwritable(where, lock, error) from None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise UserError(
            f"{where}: '{path}' is being written by another run that is still going (it holds "
            f"{lock.name}); wait for it to end, or stop it, then resume"
        ) from None

    def release() -> None:
        lock.unlink(missing_ok=True)
        os.close(descriptor)

    return release


def saved(result: ExplorationResult) -> int:
    """How many evaluations a result holds, those of an unfinished generation included."""
    return len(result) + len(result.partial)


def saved_evaluations(path: Path) -> int | None:
    """How many evaluations the file at `path` holds (None: no readable result there)."""
    try:
        result = ExplorationResult.load(path)
    except UserError:
        return None
    return saved(result)


@dataclass(frozen=True)
class SearchDefinition:
    """The search a workload defines, made once per run from the validated workload: `stored`,
    the workload as results store it, and `settings`, the same with every default filled in,
    which a stored result is compared with. Neither holds `exploration.runner`: it changes
    where candidates are evaluated, not what, so a run may resume under another runner."""

    stored: dict[str, Any]
    settings: dict[str, Any]

    @classmethod
    def of(cls, workload: Workload) -> SearchDefinition:
        """`stored` also holds the workload's root as an absolute folder (`root:`), so that
        the result's relative paths (weights, calibration, data) resolve from any working
        directory; neither side compares it (a result moved with its folder, or resumed from
        elsewhere, is the same search)."""
        stored = _without_runner(workload.to_dict())
        root = workload.resolve(".")
        stored["workload"]["root"] = os.path.abspath(root)
        return cls(stored, _without_runner(workload.to_dict(True)))

    def matches(self, stored: dict[str, Any]) -> bool:
        """Whether a result's stored workload defines this search. Only the stored one is read
        as a workload, and only when it differs from `stored`: a result written in the original
        layout (the problem's settings in `exploration:`), or before a key existed, matches
        the same search written in this project's layout with that key at its default."""
        stored = _without_root(stored)
        if stored == _without_root(self.stored):
            return True
        try:
            earlier = Workload.from_dict(_calibrator_options_only(stored), check_paths=False)
        except WorkloadError:
            return False
        return _without_runner(earlier.to_dict(defaults=True)) == self.settings

    def differences(self, stored: dict[str, Any]) -> list[str]:
        """The settings in which a result's stored workload differs from this search, each
        as `key: VALUE in the result, VALUE here` (every default filled in on both sides)."""
        try:
            earlier = Workload.from_dict(
                _calibrator_options_only(_without_root(stored)), check_paths=False
            )
        except WorkloadError as error:
            return [f"the result's workload no longer validates: {str(error).splitlines()[0]}"]
        before = _flattened(_without_runner(earlier.to_dict(defaults=True))["workload"])
        now = _flattened(self.settings["workload"])
        return [
            f"{key}: {before.get(key, '(absent)')!r} in the result, {now.get(key, '(absent)')!r} "
            "here"
            for key in sorted(set(before) | set(now))
            if before.get(key) != now.get(key)
        ]


def _flattened(data: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as dotted keys (`problem.num_bits_lower_limit`) to its leaves."""
    if not isinstance(data, dict) or not data:
        return {prefix: data}
    found: dict[str, Any] = {}
    for key, value in data.items():
        found.update(_flattened(value, f"{prefix}.{key}" if prefix else str(key)))
    return found


def _without_runner(data: dict[str, Any]) -> dict[str, Any]:
    """The workload's search alone: not where candidates run (`exploration.runner`), nor where
    relative paths start (`root`)."""
    data["workload"].get("exploration", {}).pop("runner", None)
    data["workload"].pop("root", None)
    return data


def _without_root(stored: dict[str, Any]) -> dict[str, Any]:
    """A stored workload without its `root:` (a copy where it has one)."""
    body = stored.get("workload") if isinstance(stored, dict) else None
    if not isinstance(body, dict) or "root" not in body:
        return stored
    return {**stored, "workload": {k: v for k, v in body.items() if k != "root"}}


def _calibrator_options_only(stored: dict[str, Any]) -> dict[str, Any]:
    """Results written before calibrators were a registry store every method's options
    (`percentile`, `num_bins`) whatever the method; keep the method's own."""
    body = stored.get("workload")
    calibration = body.get("calibration") if isinstance(body, dict) else None
    if not isinstance(calibration, dict):
        return stored
    calibration = CalibrationSpec.without_other_options(calibration)
    return {**stored, "workload": {**body, "calibration": calibration}}


def unfinished_results(
    paths: Iterable[Path], definition: SearchDefinition
) -> Iterator[tuple[Path, ExplorationResult]]:
    """The readable results among `paths` of the search `definition` that are not complete and
    that no other live process is writing, in the order of `paths`."""
    for path in paths:
        try:
            result = ExplorationResult.load(path)
        except UserError:
            continue
        if (
            not result.complete
            and definition.matches(result.workload)
            and not running_elsewhere(result)
        ):
            yield path, result


def _unwritable(where: str, path: Path, error: OSError) -> UserError:
    reason = error.strerror or type(error).__name__
    existing = next((p for p in path.parents if p.exists()), None)
    if existing is not None and not existing.is_dir():
        reason = f"'{existing}' is not a folder"
    return UserError(f"{where}: cannot write '{path}' ({reason}); choose a writable path")


def numbered_names(path: Path) -> Iterator[Path]:
    """`path`, then `<stem>-2<suffix>`, `<stem>-3<suffix>`, ...: the names a default result
    name takes in turn when the earlier ones are taken."""
    yield path
    for number in itertools.count(2):
        yield path.with_name(f"{path.stem}-{number}{path.suffix}")


def claim(path: Path, workload: dict[str, Any], where: str, numbered: bool) -> Path:
    """Create the result file exclusively, holding an empty unfinished result of `workload`
    (as results store it). With `numbered` (a default name), a name already taken gets the
    next free suffix `-2`, `-3`, ...; otherwise an existing file is an error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise _unwritable(where, path, error) from None
    for candidate in numbered_names(path):
        try:
            with open(candidate, "xb"):
                pass
            break
        except FileExistsError:
            if not numbered:
                raise UserError(
                    f"{where}: '{candidate}' exists; choose another path or pass --resume"
                ) from None
        except OSError as error:
            raise _unwritable(where, candidate, error) from None
    try:
        ExplorationResult(workload, {}, owner=this_process()).save(candidate)
    except UserError:
        candidate.unlink(missing_ok=True)
        raise
    return candidate


def check_writable(path: Path, where: str) -> None:
    """A file to resume must be replaceable: its folder writable (atomic writes replace it)."""
    if not os.access(path.parent, os.W_OK) or not os.access(path, os.W_OK):
        raise UserError(
            f"{where}: cannot write '{path}' (permission denied); make it and its folder "
            "writable, or copy it somewhere writable and resume with --output"
        )


def release_if_empty(path: Path) -> bool:
    """Remove a claimed file that received nothing: no evaluation and no measurement of the
    sensitivity start (which a resume takes over); True when it was removed."""
    try:
        result = ExplorationResult.load(path)
    except UserError:
        return False
    if saved(result) == 0 and "sensitivity" not in result.stats:
        path.unlink(missing_ok=True)
        return True
    return False


def warn_stopped_runs(candidates: list[Path], definition: SearchDefinition) -> None:
    """Say once of each result of this workload whose run stopped before its first save."""
    for path, result in unfinished_results(candidates, definition):
        if saved(result) == 0 and "sensitivity" not in result.stats:
            log.warning(
                "%s: an earlier run of this workload stopped before its first save; "
                "nothing was saved there (remove the file)",
                path,
            )
