"""The lowest versions pyproject.toml declares actually work. The pure-Python dependencies: each
is installed from the package index into a throwaway folder that shadows the installed version,
and a subprocess validates, dumps and reports a workload with it. The compiled ones (numpy,
pandas, scipy, scikit-learn, matplotlib, h5py, pillow, pymoo, webdataset) only work together
(pandas built for numpy 2 does not load numpy 1), so they are installed at their lowest all at
once into a throwaway environment layered over the test environment (torch stays the one the
Makefile installs), and a subprocess runs the whole pipeline on the default workload."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPOSITORY

pytestmark = pytest.mark.slow

PURE_PYTHON = ("pydantic", "pyyaml", "tqdm", "braceexpand", "platformdirs", "lazy_loader")

CHECK = """
import importlib.metadata as metadata
import sys
from model_explorer.workload.file import Workload
from model_explorer.errors import WorkloadError
for name in sys.argv[1:]:
    print(metadata.version(name))
workload = Workload.load("workloads/digits_cnn.yaml")
assert Workload.from_dict(workload.to_dict(defaults=True)) == workload
try:
    Workload.from_dict({"workload": {"model": {"type": "digits_cnn"}, "seed": "x"}})
except WorkloadError as error:
    assert "workload.seed" in str(error), error
else:
    raise AssertionError("a wrong seed passed")
from model_explorer.native import cache
assert cache.directory().name == "kernels" and "model_explorer" in str(cache.directory())
"""


def lowest(name: str) -> str:
    text = (REPOSITORY / "pyproject.toml").read_text()
    found = re.search(rf'"{re.escape(name)}>=([0-9.]+)"', text)
    assert found, f"{name} has no lower bound in pyproject.toml"
    return found.group(1)


def test_the_lowest_declared_pure_python_versions_work(tmp_path: Path) -> None:
    """All at their lowest at once, in one folder (one install, one interpreter)."""
    wanted = {name: lowest(name) for name in PURE_PYTHON}
    folder = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile"]
        + ["--target", str(folder)]
        + [f"{name}=={version}" for name, version in wanted.items()]
        + ["pydantic-core"],
        capture_output=True,
        text=True,
    )
    if install.returncode != 0 and "No matching distribution" not in install.stderr:
        pytest.skip(f"the package index cannot be reached: {install.stderr.strip()[-200:]}")
    assert install.returncode == 0, install.stderr
    pin = _core_pin(folder)  # the pydantic-core that this pydantic pins
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--upgrade"]
        + ["--no-compile", "--target", str(folder), f"pydantic-core=={pin}"],
        check=True,
        capture_output=True,
    )
    done = subprocess.run(
        [sys.executable, "-c", CHECK, *wanted],
        capture_output=True,
        text=True,
        cwd=REPOSITORY,
        env={"PYTHONPATH": str(folder), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = done.stdout.splitlines()[: len(wanted)]
    for (name, version), line in zip(wanted.items(), found, strict=True):
        assert line.startswith(version.rstrip(".0") or version), (name, line)


def _core_pin(folder: Path) -> str:
    metadata = next(folder.glob("pydantic-*.dist-info")) / "METADATA"
    found = re.search(r"Requires-Dist: pydantic-core==([0-9.]+)", metadata.read_text())
    assert found, "pydantic names no pydantic-core pin"
    return found.group(1)


COMPILED = (
    "numpy", "pandas", "scipy", "scikit-learn", "matplotlib", "h5py", "pillow", "pymoo",
    "webdataset", "onnx", "ml_dtypes",
)  # fmt: skip

PIPELINE = """
import sys
from model_explorer.cli import main
import numpy, pandas, scipy, sklearn, matplotlib, h5py, PIL, pymoo
print(numpy.__version__, pandas.__version__, scipy.__version__, sklearn.__version__)
workload = sys.argv[1]
for command in (
    ["retrain", "--baseline", workload, "--no-progress"],
    ["calibrate", workload],
    ["explore", workload, "--report", "--output", sys.argv[2]],
    ["cost", workload],
    ["compare", workload, "--env", "eager", "--env", "eager-fp64", "--out", sys.argv[3]],
    ["export", sys.argv[2] + "#1", "--onnx", sys.argv[3] + ".onnx"],
):
    assert main(command) == 0, command
"""


def test_the_lowest_declared_compiled_dependencies_work_together(tmp_path: Path) -> None:
    import sysconfig

    import yaml

    environment = tmp_path / "venv"
    # no pip of its own: this environment's pip installs into it (`pip --python`)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(environment)], check=True)
    python = environment / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    base = sysconfig.get_path("purelib")
    (Path(site) / "base.pth").write_text(f"import site; site.addsitedir({base!r})\n")
    wanted = [f"{name}=={lowest(name)}" for name in COMPILED]
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet"]
        + ["--disable-pip-version-check", "--only-binary=:all:", "--no-compile"]
        + ["-c", str(REPOSITORY / "constraints.txt"), *wanted],
        capture_output=True,
        text=True,
    )
    if install.returncode != 0 and "No matching distribution" not in install.stderr:
        pytest.skip(f"the package index cannot be reached: {install.stderr.strip()[-200:]}")
    assert install.returncode == 0, install.stderr
    data = yaml.safe_load((REPOSITORY / "workloads" / "digits_cnn.yaml").read_text())
    body = data["workload"]
    body["model"]["weights"] = str(tmp_path / "baseline.pt")
    body["calibration"]["file"] = str(tmp_path / "calibration.pt")
    body["retraining"]["epochs"] = 2
    body["exploration"]["nsga"].update(pop_size=6, offsprings=6, generations=2)
    workload = tmp_path / "w.yaml"
    workload.write_text(yaml.safe_dump(data))
    arguments = [str(workload), str(tmp_path / "r.pkl"), str(tmp_path / "compare")]
    done = subprocess.run(
        [str(python), "-c", PIPELINE, *arguments],
        capture_output=True,
        text=True,
        cwd=REPOSITORY,
        env={"PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    from packaging.version import Version

    versions = [Version(v) for v in done.stdout.split()[:4]]
    names = ("numpy", "pandas", "scipy", "scikit-learn")
    assert versions == [Version(lowest(name)) for name in names]
    assert (tmp_path / "r_report" / "report.md").exists()
