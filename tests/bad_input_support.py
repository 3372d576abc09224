"""Shared by the broken-input tests: a tiny workload (digits CNN with random weights, a few
samples), its calibration made once, and the CLI run in-process with its exit status and the
lines it wrote on stderr."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from model_explorer.cli import main

# Written the original tool's way (the problem's settings in `exploration:` and `extra_args`),
# so that the broken-input tests also check that errors name the keys where such a file has
# them; tests/problems/test_objectives.py moves them to `problem:`.
TINY = {
    "workload": {
        "seed": 0,
        "device": "cpu",
        "model": {"type": "digits_cnn", "pretrained": False},
        "calibration": {
            "file": "calibration.pt",
            "method": "max",
            "datasets": {
                "calibrate": {
                    "type": "digits",
                    "split": "train",
                    "batch_size": 32,
                    "sample_limit": 32,
                }
            },
        },
        "exploration": {
            "nsga": {"pop_size": 4, "generations": 1},
            "minimum_accuracy": 0.0,
            "early_reject": False,
            "datasets": {
                "exploration": {
                    "type": "digits",
                    "split": "validation",
                    "batch_size": 16,
                    "sample_limit": 16,
                }
            },
            "extra_args": {"num_bits_lower_limit": 2, "num_bits_upper_limit": 8},
        },
    }
}


@dataclass
class Outcome:
    status: int
    out: str
    errors: list[str]  # the non-empty lines written on stderr

    def one_error(self, *words: str) -> str:
        """The single `error:` line, checked to hold every word, after exit status 2."""
        assert self.status == 2, (self.status, self.errors)
        assert len(self.errors) == 1, self.errors
        line = self.errors[0]
        assert line.startswith("error: "), line
        for word in words:
            assert word in line, (word, line)
        return line


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> Outcome:
    capsys.readouterr()
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line.strip()]
    return Outcome(status, captured.out, errors)


def write(data: dict, path: Path) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def tiny_calibration(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny workload's calibration file, made once (tests only read it)."""
    folder = tmp_path_factory.mktemp("tiny")
    data = copy.deepcopy(TINY)
    data["workload"]["calibration"]["file"] = str(folder / "calibration.pt")
    assert main(["calibrate", str(write(data, folder / "w.yaml"))]) == 0
    return folder / "calibration.pt"


@pytest.fixture
def tiny(tiny_calibration: Path) -> dict:
    """A fresh copy of the tiny workload (root `workload:`), using the shared calibration."""
    data = copy.deepcopy(TINY)
    data["workload"]["calibration"]["file"] = str(tiny_calibration)
    return data
