"""The lowest versions pyproject.toml declares for the pure-Python dependencies actually work:
each is installed from the package index into a throwaway folder that shadows the installed
version, and a subprocess validates, dumps and reports a workload with it. (The compiled
dependencies, torch, numpy, pandas and their kind, are tested at the versions the Makefile
installs; their lower bounds are what their wheels for Python 3.10+ need.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPOSITORY

PURE_PYTHON = ("pydantic", "pyyaml", "tqdm", "braceexpand")

CHECK = """
import importlib.metadata as metadata
from model_explorer.workload import Workload
from model_explorer.errors import WorkloadError
print(metadata.version({name!r}))
workload = Workload.load("workloads/digits_cnn.yaml")
assert Workload.from_dict(workload.to_dict(defaults=True)) == workload
try:
    Workload.from_dict({{"workload": {{"model": {{"type": "digits_cnn"}}, "seed": "x"}}}})
except WorkloadError as error:
    assert "workload.seed" in str(error), error
else:
    raise AssertionError("a wrong seed passed")
"""


def lowest(name: str) -> str:
    text = (REPOSITORY / "pyproject.toml").read_text()
    found = re.search(rf'"{re.escape(name)}>=([0-9.]+)"', text)
    assert found, f"{name} has no lower bound in pyproject.toml"
    return found.group(1)


@pytest.mark.parametrize("name", PURE_PYTHON)
def test_the_lowest_declared_version_works(name: str, tmp_path: Path) -> None:
    version = lowest(name)
    folder = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(folder)]
        + [f"{name}=={version}"]
        + (["pydantic-core"] if name == "pydantic" else []),
        capture_output=True,
        text=True,
    )
    if install.returncode != 0 and "No matching distribution" not in install.stderr:
        pytest.skip(f"the package index cannot be reached: {install.stderr.strip()[-200:]}")
    assert install.returncode == 0, install.stderr
    if name == "pydantic":  # the pydantic-core that this pydantic pins
        pin = _core_pin(folder)
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--upgrade"]
            + ["--target", str(folder), f"pydantic-core=={pin}"],
            check=True,
            capture_output=True,
        )
    done = subprocess.run(
        [sys.executable, "-c", CHECK.format(name=name)],
        capture_output=True,
        text=True,
        cwd=REPOSITORY,
        env={"PYTHONPATH": str(folder), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[0].startswith(version.rstrip(".0") or version)


def _core_pin(folder: Path) -> str:
    metadata = next(folder.glob("pydantic-*.dist-info")) / "METADATA"
    found = re.search(r"Requires-Dist: pydantic-core==([0-9.]+)", metadata.read_text())
    assert found, "pydantic names no pydantic-core pin"
    return found.group(1)
