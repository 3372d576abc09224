"""The shipped transformer workloads end to end, shrunk: train (digits_vit), calibrate, explore."""

from __future__ import annotations

from pathlib import Path

import yaml

from model_explorer.cli import main
from model_explorer.results import ExplorationResult

REPOSITORY = Path(__file__).resolve().parents[2]


def _shrunk(name: str, tmp_path: Path, epochs: int | None = None) -> Path:
    data = yaml.safe_load((REPOSITORY / "workloads" / f"{name}.yaml").read_text())
    workload = data["workload"]
    if workload["model"].get("weights"):
        workload["model"]["weights"] = str(tmp_path / "weights.pt")
    workload["calibration"]["file"] = str(tmp_path / "calibration.pt")
    workload["exploration"]["nsga"].update(pop_size=4, offsprings=4, generations=1)
    if epochs is not None:
        workload["retraining"]["epochs"] = epochs
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_digits_vit_trains_calibrates_and_explores(tmp_path: Path) -> None:
    path = _shrunk("digits_vit", tmp_path, epochs=2)
    assert main(["retrain", "--baseline", str(path)]) == 0
    assert main(["calibrate", str(path)]) == 0
    assert main(["explore", str(path), "--output", str(tmp_path / "r.pkl")]) == 0
    result = ExplorationResult.load(tmp_path / "r.pkl")
    layers = {name.rsplit(".", 1)[0] for name in result.variable_names}
    for block in ("blocks.0", "blocks.1"):
        for part in ("in_proj", "out_proj", "matmul_0", "matmul_1", "mlp.0", "mlp.2"):
            assert f"{block}.{'attention.' if 'mlp' not in part else ''}{part}" in layers
    assert len(result.variable_names) == 2 * (1 + 2 * 6 + 1)
