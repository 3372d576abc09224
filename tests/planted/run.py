"""Planted faults (`make test-planted`): each patch of tests/planted/ applied in a scratch copy
of the repository and the tests catalogue.yaml names for it run there; a table of the faults
caught and missed.

First the named tests run once on an unpatched copy: each must pass there, or its fault is
not checked (a test that fails, or is skipped, without the fault catches nothing). Then, for
each fault, a fresh copy (the files git tracks, and those it would track, as they are in the
working tree), its patch applied with `git apply`, and its tests run with this interpreter
(`python -m pytest -q -x -p no:randomly`, PYTHONPATH the copy, no bytecode written); the fault
is caught when one of them fails. A patch that no longer applies means the code it plants in
has moved: the table names the patch, to be written again against the code as it is now. A
patch to a C source builds its library in a kernel folder of the scratch copy's own. The exit
status is 1 when a fault is missed, a patch does not apply or a fault could not be checked,
2 when the catalogue itself is wrong.

    python tests/planted/run.py                  every fault
    python tests/planted/run.py --only NAME ...  the faults named (repeat --only)
    python tests/planted/run.py --list           the catalogue
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parents[1]
CATALOGUE = HERE / "catalogue.yaml"
PYTEST = ["-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"]

# A pytest plugin, loaded by name in the runs: each test's outcome, and where model_explorer
# was imported from, written as JSON lines to the file PLANTED_OUTCOMES names.
PLUGIN = """
import json
import os


def _write(entry):
    with open(os.environ["PLANTED_OUTCOMES"], "a") as file:
        file.write(json.dumps(entry) + "\\n")


def pytest_sessionstart(session):
    try:
        import model_explorer
    except Exception as error:  # a planted fault may break the import: the tests will say so
        _write({"imported": None, "error": repr(error)})
        return
    _write({"imported": model_explorer.__file__})


def pytest_collectreport(report):
    if report.failed:
        _write({"nodeid": report.nodeid, "when": "collect", "outcome": "failed",
                "message": str(report.longrepr).strip().splitlines()[-1:]})


def pytest_runtest_logreport(report):
    crash = getattr(report.longrepr, "reprcrash", None)
    _write({"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
            "message": [crash.message.splitlines()[0]] if crash is not None else []})
"""


@dataclass
class Fault:
    name: str
    says: str
    tests: list[str]

    @property
    def patch(self) -> Path:
        return HERE / f"{self.name}.patch"


@dataclass
class Outcomes:
    """What one pytest run reported: each test's outcome (failed where any phase failed) and
    the first failure's message, its exit status, seconds, where it imported the package."""

    tests: dict[str, str]
    messages: dict[str, str]
    imported: str | None
    status: int | None
    seconds: float

    def of(self, fault: Fault) -> dict[str, str]:
        """The outcomes of the tests a fault names (a function names all its parameters)."""
        return {
            node: outcome
            for node, outcome in self.tests.items()
            if any(node == t or node.startswith((t + "[", t + "::")) for t in fault.tests)
        }


def load_catalogue() -> list[Fault]:
    """The catalogue, checked: unique names, each with tests and a patch, no patch unlisted."""
    entries = yaml.safe_load(CATALOGUE.read_text())["faults"]
    faults = [Fault(e["name"], " ".join(e["says"].split()), list(e["tests"])) for e in entries]
    names = [fault.name for fault in faults]
    problems = [f"{name}: named twice" for name in sorted({n for n in names if names.count(n) > 1})]
    problems += [f"{f.name}: no tests named" for f in faults if not f.tests]
    problems += [f"{f.name}: no patch {f.patch.name}" for f in faults if not f.patch.exists()]
    problems += [
        f"{path.name}: a patch the catalogue does not name"
        for path in sorted(HERE.glob("*.patch"))
        if path.stem not in names
    ]
    if problems:
        raise CatalogueError("; ".join(problems))
    return faults


class CatalogueError(Exception):
    """The catalogue and the patches beside it do not match."""


def repository_files() -> list[str]:
    """The files git tracks and those it would track (not ignored), as paths from the root."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPOSITORY,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return sorted({name for name in listed.split("\0") if name})


def copy_repository(files: list[str], target: Path) -> Path:
    for name in files:
        source = REPOSITORY / name
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the working tree, not yet in git
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination, follow_symlinks=False)
    return target


def apply_patch(patch: Path, copy: Path) -> str | None:
    """Apply `patch` in `copy`; None, or why it does not apply."""
    environment = {**os.environ, "GIT_CEILING_DIRECTORIES": str(copy.parent)}
    applied = subprocess.run(
        ["git", "apply", "--verbose", str(patch)],
        cwd=copy,
        capture_output=True,
        text=True,
        env=environment,
    )
    if applied.returncode == 0:
        return None
    said = [
        line
        for line in applied.stderr.splitlines()
        if line.startswith("error") and not line.endswith(":")
    ]
    return "; ".join(said) or applied.stderr.strip()


def touches_c(patch: Path) -> bool:
    """Whether a patch changes a C source (a kernel library of the native folder)."""
    return any(
        line.startswith("+++ b/") and line.rstrip().endswith(".c")
        for line in patch.read_text().splitlines()
    )


def run_tests(
    copy: Path,
    tests: list[str],
    scratch: Path,
    label: str,
    timeout: float,
    extra: list[str],
    kernels: bool = False,
) -> Outcomes:
    record = scratch / f"{label}.jsonl"
    plugin = scratch / "plugin"
    plugin.mkdir(exist_ok=True)
    (plugin / "planted_outcomes.py").write_text(PLUGIN)
    environment = dict(os.environ)
    paths = [str(copy), str(plugin)] + [p for p in [environment.get("PYTHONPATH")] if p]
    environment.update(
        PYTHONPATH=os.pathsep.join(paths),
        PYTHONDONTWRITEBYTECODE="1",
        PLANTED_OUTCOMES=str(record),
    )
    if kernels:  # the planted library built apart, and thrown away with the scratch folder
        environment["MODEL_EXPLORER_KERNEL_DIR"] = str(scratch / f"{label}.kernels")
    command = [sys.executable, *PYTEST, *extra, "-p", "planted_outcomes", *tests]
    start = time.perf_counter()
    with open(scratch / f"{label}.log", "w") as log:
        try:
            status: int | None = subprocess.run(
                command,
                cwd=copy,
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            ).returncode
        except subprocess.TimeoutExpired:
            status = None
    seconds = time.perf_counter() - start
    tests_found: dict[str, str] = {}
    messages: dict[str, str] = {}
    imported = None
    lines = record.read_text().splitlines() if record.exists() else []
    for entry in map(json.loads, lines):
        if "imported" in entry:
            imported = entry["imported"]
            continue
        node, outcome = entry["nodeid"], entry["outcome"]
        if outcome == "failed":
            tests_found[node] = "failed"
            messages.setdefault(node, " ".join(entry["message"]))
        elif tests_found.get(node) != "failed" and (
            entry["when"] == "call" or outcome == "skipped"
        ):
            tests_found[node] = outcome
    return Outcomes(tests_found, messages, imported, status, seconds)


def imported_elsewhere(outcomes: Outcomes, copy: Path) -> str | None:
    """Why a run does not count: it imported the package from elsewhere than its copy."""
    if outcomes.imported is None:
        return None
    if Path(outcomes.imported).resolve().is_relative_to(copy.resolve()):
        return None
    return (
        f"the tests imported model_explorer from {outcomes.imported}, not from the scratch copy "
        "(an installed copy shadows PYTHONPATH)"
    )


def baseline_problem(fault: Fault, outcomes: Outcomes) -> str | None:
    """Why a fault cannot be checked: its tests not found, failing or all skipped unpatched."""
    found = outcomes.of(fault)
    missing = [t for t in fault.tests if not outcomes.of(Fault("", "", [t]))]
    if missing:
        return "not found: " + ", ".join(missing)
    failing = [node for node, outcome in found.items() if outcome == "failed"]
    if failing:
        return "fails unpatched: " + ", ".join(failing)
    if all(outcome == "skipped" for outcome in found.values()):
        return "skipped here: " + ", ".join(found)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", metavar="NAME", help="run this fault only")
    parser.add_argument("--list", action="store_true", help="list the faults and their tests")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder and logs")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a run may take")
    arguments = parser.parse_args(argv)
    try:
        faults = load_catalogue()
    except CatalogueError as error:
        print(f"tests/planted/catalogue.yaml: {error}", file=sys.stderr)
        return 2
    if arguments.list:
        for fault in faults:
            print(f"{fault.name}: {fault.says}")
            for test in fault.tests:
                print(f"    {test}")
        return 0
    if arguments.only:
        unknown = sorted(set(arguments.only) - {fault.name for fault in faults})
        if unknown:
            print(f"no such fault: {', '.join(unknown)} (--list names them)", file=sys.stderr)
            return 2
        faults = [fault for fault in faults if fault.name in arguments.only]
    started = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="planted-"))
    try:
        rows = check(faults, scratch, arguments.timeout)
    finally:
        if arguments.keep:
            print(f"scratch folder and logs kept in {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    width = max(len(fault.name) for fault in faults)
    print(f"\n{'fault':{width}}  tests  {'result':10} seconds")
    for name, count, result, seconds, said in rows:
        shown = f"{seconds:7.1f}" if seconds is not None else "      -"
        print(f"{name:{width}}  {count:5}  {result:10} {shown}" + (f"  {said}" if said else ""))
    caught = sum(1 for row in rows if row[2] == "caught")
    print(
        f"\n{len(rows)} faults: {caught} caught, {len(rows) - caught} not "
        f"({', '.join(sorted({row[2] for row in rows} - {'caught'})) or 'none'}); "
        f"{time.perf_counter() - started:.0f} s in all"
    )
    return 0 if caught == len(rows) else 1


def check(
    faults: list[Fault], scratch: Path, timeout: float
) -> list[tuple[str, int, str, float | None, str]]:
    """Each fault's row: name, tests named, result, seconds of its patched run, what was said."""
    files = repository_files()
    rows: list[tuple[str, int, str, float | None, str]] = []
    every = list(dict.fromkeys(test for fault in faults for test in fault.tests))
    copy = copy_repository(files, scratch / "unpatched")
    print(f"unpatched: {len(every)} tests", flush=True)
    baseline = run_tests(copy, every, scratch, "unpatched", timeout, [])
    said = imported_elsewhere(baseline, copy)
    if baseline.status is None:
        said = f"the unpatched run took over {timeout:.0f} s"
    elif baseline.status not in (0, 1):  # not a test's failure: a usage or collection error
        log = (scratch / "unpatched.log").read_text().splitlines()
        errors = [line for line in log if line.startswith("ERROR")] or log[-1:]
        said = f"the unpatched run stopped (pytest exited {baseline.status}): " + " ".join(errors)
    if said is not None:
        return [(fault.name, len(fault.tests), "NOT RUN", None, said) for fault in faults]
    counted = {o: list(baseline.tests.values()).count(o) for o in ("passed", "skipped", "failed")}
    print(
        "unpatched: "
        + ", ".join(f"{n} {o}" for o, n in counted.items() if n)
        + f" in {baseline.seconds:.0f} s",
        flush=True,
    )
    shutil.rmtree(copy)
    for fault in faults:
        problem = baseline_problem(fault, baseline)
        if problem is not None:
            rows.append((fault.name, len(fault.tests), "NOT RUN", None, problem))
            continue
        copy = copy_repository(files, scratch / fault.name)
        refused = apply_patch(fault.patch, copy)
        if refused is not None:
            said = (
                f"tests/planted/{fault.patch.name} does not apply (the code moved; write the "
                f"patch again against it): {refused}"
            )
            rows.append((fault.name, len(fault.tests), "NO PATCH", None, said))
            continue
        outcomes = run_tests(
            copy, fault.tests, scratch, fault.name, timeout, ["-x"], touches_c(fault.patch)
        )
        found = outcomes.of(fault)
        failed = [node for node, outcome in found.items() if outcome == "failed"]
        elsewhere = imported_elsewhere(outcomes, copy)
        if elsewhere is not None:
            result, said = "NOT RUN", elsewhere
        elif outcomes.status is None:
            result, said = "TIMEOUT", f"over {timeout:.0f} s"
        elif failed:
            result, said = "caught", "by " + failed[0].rpartition("::")[2]
        elif outcomes.status == 0:
            result, said = "MISSED", ""
        else:
            result, said = (
                "ERROR",
                (f"pytest exited {outcomes.status} before its tests ran (--keep keeps its log)"),
            )
        rows.append((fault.name, len(fault.tests), result, outcomes.seconds, said))
        message = outcomes.messages[failed[0]] if failed else ""
        first = f" ({message[:100]}{'...' if len(message) > 100 else ''})" if message else ""
        print(f"{fault.name}: {result} in {outcomes.seconds:.0f} s{first}", flush=True)
        shutil.rmtree(copy)
    return rows


if __name__ == "__main__":
    sys.exit(main())
