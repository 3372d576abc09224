"""The search benchmark's peers (benchmarks/peer_*.py): a peer that is not installed is skipped
with one line, and modelopt's AutoQuantize (installed with the test extras) maps its per-layer
formats onto the genome as the budgets demand, by hand: at 2 effective bits only the 2-bit
format fits, at 8 nothing needs to be cut."""

from __future__ import annotations

import importlib
import sys

import pytest
import torch
from torch import nn

from conftest import REPOSITORY


@pytest.fixture
def benchmarks(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.syspath_prepend(str(REPOSITORY / "benchmarks"))


def test_a_peer_that_is_not_installed_is_one_line(benchmarks, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "aimet_torch", None)  # as if aimet-torch were missing
    aimet = importlib.import_module("peer_aimet")
    assert aimet.available().startswith("aimet-torch does not import")
    bench = importlib.import_module("bench_search_quality")
    assert bench.peer_runs(["aimet"], None, None, "weighted_bits", [4]) == {}
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("aimet: skipped (aimet-torch does not import")


def test_autoquantize_meets_its_budgets_on_the_genome(benchmarks) -> None:
    pytest.importorskip("modelopt.torch.quantization", reason="the modelopt extra is missing")
    peer = importlib.import_module("peer_modelopt")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)).eval()
    inputs = torch.randn(64, 6)
    batches = [(inputs[i : i + 32], model(inputs[i : i + 32]).argmax(1)) for i in (0, 32)]
    genes = [(layer, role, 2, 8) for layer in ("0", "2") for role in ("input", "weight")]
    found = peer.propose(model, batches, batches, genes, [2.0, 8.0], seed=0)
    assert found.genomes == [[2, 2, 2, 2], [8, 8, 8, 8]]
    # One calibration pass per format over 64 samples, then 64 scored samples each counted
    # as a forward and a backward plus one re-run per format.
    formats = len(peer.candidate_pairs(genes, peer.DEFAULT_LEVELS))
    assert found.forwards == 64 * formats + 64 * (2 + formats)
