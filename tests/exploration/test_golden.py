"""Seeded explorations of the shipped digits workloads against golden files.

The golden files in tests/data/golden/ hold every individual (genome, configuration, values,
accuracies, feasibility) and every generation's survivors of small seeded searches, recorded
before the package was restructured. A search of the same seed must ask for the same genomes
and measure the same values (to 1e-6) whatever the code's layout: this is what "behaviour stays
exactly as it is" means for a search.

They were recorded on 2 CPU cores with torch's default thread count; with another thread count a
block mean at a threshold's edge may fall the other way (one block in 360 samples, measured with
one thread). The same holds across machines: a reduction summed in another order moves a block
mean that sits on a threshold by one ulp, and pymoo's operators may round a gene's last bit
otherwise. So genomes are compared to 1e-12, and quantities counted in sparse blocks to a few
blocks in the 360 samples (`BLOCK_TOLERANCE`); a change of behaviour moves far more than that, and
a flip that changes what NSGA-II selects changes the genomes asked for, which are compared.
Regenerate only when a change is meant to alter search results:
`python tests/exploration/test_golden.py --write [CASE ...]` (every case when none is named; it
trains the baseline as the `trained_digits` fixture does).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

REPOSITORY = Path(__file__).resolve().parents[2]
GOLDEN = REPOSITORY / "tests" / "data" / "golden"
SMALL_SEARCH = {"pop_size": 8, "offsprings": 8, "generations": 3}

# case -> (shipped workload, changes to its sections: {section: {key: value}})
CASES = {
    "quantization": ("digits_cnn.yaml", {}),
    "sensitivity_per_layer_weighting": (
        "digits_cnn.yaml",
        {
            "exploration": {"initialization": "sensitivity"},
            "problem": {
                "objectives": ["accuracy", "weighted_bits"],
                "num_bits_lower_limit": 3,
                "num_bits_upper_limit": 8,
                "bit_weighting_function": "bits_weighted_per_layer",
                "layer_bounds": {"0.*": [6, 8]},
            },
        },
    ),
    "bops": ("digits_cnn.yaml", {"problem": {"objectives": ["accuracy", "bops"]}}),
    # Without its CSV the energy model is computed when the search starts.
    "energy": ("digits_cnn_energy.yaml", {"energy_evaluation": {"dram_analysis_file": None}}),
    "sparsity": ("digits_cnn_sparsity.yaml", {}),
    "joint": ("digits_cnn_joint.yaml", {}),
}


# Quantities counted in zero blocks: a block mean on a threshold's edge may fall either way on
# another machine (one block in 360 samples, measured), which moves them by about 1/360 per
# sample.
BLOCK_TOLERANCE = {
    "created_blocks": {"abs": 0.01},
    "present_blocks": {"abs": 0.01},
    "block_sparsity": {"rel": 1e-4},
    "effective_bops": {"rel": 1e-4},
}


def case_workload(case: str, checkpoint: Path, folder: Path) -> Path:
    """The case's workload file in `folder`: the shipped one with the test's weights, a
    calibration file in `folder` and a small search."""
    name, changes = CASES[case]
    data = yaml.safe_load((REPOSITORY / "workloads" / name).read_text())
    body = data["workload"]
    body["name"] = f"golden_{case}"
    body["model"]["weights"] = str(checkpoint)
    if "calibration" in body:
        body["calibration"]["file"] = str(folder / "calibration.pt")
        # The quantizer setting the golden files were recorded with (the defaults then).
        body["calibration"].setdefault("method", "percentile")
    body.setdefault("quantization", {}).setdefault("input", {}).setdefault("unsigned", False)
    body["exploration"]["nsga"].update(SMALL_SEARCH)
    body["exploration"]["strategy"] = "nsga2"  # the search the golden files were recorded with
    body["exploration"]["initialization"] = "random"  # and its start (a case may change it)
    for section, keys in changes.items():
        target = body.setdefault(section, {})
        for key, value in keys.items():
            if value is None:
                target.pop(key, None)
            else:
                target[key] = value
    path = folder / f"{case}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_case(case: str, checkpoint: Path, folder: Path) -> dict:
    """Calibrate (when the workload needs it) and explore; the result as golden data."""
    from model_explorer.cli import main
    from model_explorer.results import ExplorationResult

    path = case_workload(case, checkpoint, folder)
    if "calibration" in yaml.safe_load(path.read_text())["workload"]:
        assert main(["calibrate", "--if-missing", str(path)]) == 0
    output = folder / f"{case}.pkl"
    assert main(["explore", str(path), "--output", str(output)]) == 0
    return golden_data(ExplorationResult.load(output))


def golden_data(result) -> dict:  # noqa: ANN001
    """What a golden file holds of a result: everything but wall-clock times."""
    keep = ("id", "generation", "genome", "configuration", "values", "accuracies", "feasible")
    return {
        "variables": result.variable_names,
        "baseline": result.baseline,
        "individuals": [
            {key: record[key] for key in (*keep, "complete")} for record in result.records
        ],
        "generations": [
            {"generation": g["generation"], "population": g["population"]}
            for g in result.generations
        ],
        "stats": {key: value for key, value in result.stats.items() if key != "seconds"},
    }


@pytest.fixture(scope="module")
def golden_runs(trained_digits, tmp_path_factory) -> dict[str, dict]:
    _, checkpoint = trained_digits
    folder = tmp_path_factory.mktemp("golden")
    return {case: run_case(case, checkpoint, folder) for case in CASES}


@pytest.mark.parametrize("case", CASES)
def test_a_seeded_search_reproduces_its_golden_file(case: str, golden_runs: dict) -> None:
    expected = json.loads((GOLDEN / f"{case}.json").read_text())
    actual = golden_runs[case]
    assert actual["variables"] == expected["variables"]
    assert actual["baseline"] == pytest.approx(expected["baseline"], abs=1e-6)
    assert actual["generations"] == expected["generations"]
    # Counts added since (sample-forwards, seconds) are checked by tests of their own.
    assert {key: actual["stats"][key] for key in expected["stats"]} == expected["stats"]
    assert len(actual["individuals"]) == len(expected["individuals"])
    for got, want in zip(actual["individuals"], expected["individuals"], strict=True):
        where = f"{case} individual {want['id']}"
        for key in ("id", "generation", "configuration", "feasible", "complete"):
            assert got[key] == want[key], f"{where}: {key}"
        assert got["genome"] == pytest.approx(want["genome"], rel=1e-12, abs=1e-15), where
        assert got["accuracies"] == pytest.approx(want["accuracies"], abs=1e-6), where
        assert got["values"].keys() == want["values"].keys(), where
        for name, value in want["values"].items():
            tolerance = BLOCK_TOLERANCE.get(name, {"rel": 1e-6, "abs": 1e-6})
            assert got["values"][name] == pytest.approx(value, **tolerance), f"{where}: {name}"


def _write_golden_files(cases: list[str]) -> None:
    """Train the baseline as the `trained_digits` fixture does and record `cases`."""
    import tempfile

    sys.path.insert(0, str(REPOSITORY / "tests"))
    from conftest import DEFAULT_WORKLOAD, write_workload
    from model_explorer.context import WorkloadContext
    from model_explorer.retraining import train_baseline
    from model_explorer.workload import Workload

    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        data = yaml.safe_load(DEFAULT_WORKLOAD.read_text())
        data["workload"]["model"]["weights"] = str(folder / "baseline.pt")
        data["workload"]["calibration"]["file"] = str(folder / "calibration.pt")
        workload_file = write_workload(data, folder / "digits_cnn.yaml")
        context = WorkloadContext(Workload.load(workload_file), device="cpu")
        train_baseline(context, progress=False)
        GOLDEN.mkdir(parents=True, exist_ok=True)
        for case in cases:
            found = run_case(case, folder / "baseline.pt", folder)
            (GOLDEN / f"{case}.json").write_text(json.dumps(found, indent=1) + "\n")
            print(f"wrote {GOLDEN / case}.json: {len(found['individuals'])} individuals")


if __name__ == "__main__":
    unknown = [case for case in sys.argv[2:] if case not in CASES]
    if sys.argv[1:2] != ["--write"] or unknown:
        sys.exit(f"usage: python tests/exploration/test_golden.py --write [{' '.join(CASES)}]")
    _write_golden_files(sys.argv[2:] or list(CASES))
