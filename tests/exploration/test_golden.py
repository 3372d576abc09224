"""Seeded explorations of the shipped digits workloads against golden files.

The golden files in tests/data/golden/ hold every individual (genome, configuration, values,
accuracies, feasibility) and every generation's survivors of small seeded searches, recorded
before the package was restructured, and every measurement those searches made, in order: the
float baseline, each row of the sensitivity table, each candidate's evaluation. Two things must
hold whatever the code's layout, and on any processor:

- The search: fed the recorded measurements, a search of the same seed asks for the same
  configurations in the same order, and keeps the same individuals, survivors and counts (the
  genomes to 1e-12: pymoo's arithmetic may round a last bit otherwise). This part does not
  depend on floating-point kernels at all (the explorer breaks pymoo's ties in the seeded
  order: exploration/algorithms.py `ties_in_seeded_order`).
- The measurements: each one, measured again here on the shipped checkpoint
  (tests/conftest.py DIGITS_CHECKPOINT) while the search runs, agrees with the recorded one
  within MEASUREMENT_TOLERANCE. Costs known without the model are exact; what the model
  measures rounds its sums in the order the processor's kernels choose, so an activation on a
  quantization level's edge, or a block mean on a threshold's, may fall the other way.

Feeding the search the recorded measurements, not the ones measured here, is what keeps the
first part exact: a one-sample difference in a sensitivity drop or an accuracy would otherwise
change what NSGA-II selects, and from there every genome it asks for.

Regenerate only when a change is meant to alter search results:
`python tests/exploration/test_golden.py --write [CASE ...]` (every case when none is named).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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
    # the default since the search ranks by the divergence from the float model
    "quantization_kl": ("digits_cnn.yaml", {"problem": {"selection": "kl"}}),
}

# How far a measurement made here may be from the recorded one, for what the model measures.
# Measured across the kernel settings of tests/across_kernels.py (AVX-512, AVX2, AVX, SSE4.2;
# one and two threads), about 1,000 measurements: no accuracy, early rejection or sample count
# differed; block counts moved by one block (1/360 per sample) in up to 4 of the joint search's
# 32 evaluations (an 8-bit input on a level's edge rounds to zero or not, and its block with it),
# effective BOPs by 1.6e-6 relative. The bounds leave room for a processor that flips a few
# more; a change of behaviour moves many measurements, and by more.
SAMPLES = 360
BLOCKS = {  # value -> largest difference (effective_bops, kl: relative)
    "created_blocks": 3 / SAMPLES,  # three blocks whose mean crosses its threshold
    "present_blocks": 3 / SAMPLES,
    "block_sparsity": 3 / SAMPLES / 1056,  # of a sample's 1,056 blocks
    "effective_bops": 1e-4,
    # the mean divergence sums float32 per-sample values in the kernels' order
    "kl": 1e-4,
}
RELATIVE = ("effective_bops", "kl")
# An activation on a quantization level's edge that rounds the other way moves one sample's
# output, and the mean divergence with it: by 7e-4 of itself in one of 32 measurements with
# torch, MKL and oneDNN forced to AVX2, AVX or SSE4.2 (tests/across_kernels.py). Such a
# measurement counts as one that flipped, and stays within this share of the recorded value.
KL_EDGE = 1e-2
# An accuracy may differ by one sample whose top-1 flips, and an early rejection may be decided
# at another batch (`complete`, `samples`), in at most this share of the measurements.
ONE_SAMPLE = 1 / SAMPLES
MAY_FLIP = 0.05


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
    body["problem"]["selection"] = "accuracy"  # and the ranking by the metric (likewise)
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


class Measurements:
    """Every measurement one search makes, in order, by kind: `baseline` (the float model's
    accuracies), `alone` (a sensitivity-table row: [quantizer, bits, accuracy]) and
    `evaluations` (a candidate's configuration and what it measured).

    Recording (`recorded` None), each is kept as measured. Replaying, each is measured as well,
    compared with the recorded one of its kind and position (`differences`), and the recorded
    one is handed to the search; a request for another configuration than the recorded one
    fails at once, naming both."""

    def __init__(self, recorded: dict[str, list] | None = None) -> None:
        self.recorded = recorded
        self.taken: dict[str, list] = {"baseline": [], "alone": [], "evaluations": []}
        self.differences: list[dict[str, Any]] = []
        self.compared = 0

    def take(self, kind: str, measured: Any, request: Any = None) -> Any:
        """The value the search receives for its next `kind` measurement."""
        position = len(self.taken[kind])
        self.taken[kind].append(measured)
        if self.recorded is None:
            return measured
        recorded = self.recorded[kind]
        where = f"{kind} {position}"
        assert position < len(recorded), f"{where}: the golden file records {len(recorded)}"
        expected = recorded[position]
        if request is not None:
            assert request(expected) == request(measured), (
                f"{where}: the search asked for {request(measured)}, the golden file has "
                f"{request(expected)}"
            )
        self.compared += 1
        self.differences.extend(
            {"where": where, "value": name, "recorded": want, "measured": got}
            for name, want, got in _measured_pairs(kind, expected, measured)
            if not math.isclose(want, got, rel_tol=1e-9, abs_tol=1e-12)
        )
        return expected


def _measured_pairs(kind: str, expected: Any, measured: Any) -> Iterator[tuple[str, float, float]]:
    """(value name, recorded, measured) of one measurement; `complete` as 0/1."""
    if kind == "baseline":
        yield from (("accuracy", a, b) for a, b in zip(expected, measured, strict=True))
    elif kind == "alone":
        yield "accuracy", expected[2], measured[2]
    else:
        yield "complete", float(expected["complete"]), float(measured["complete"])
        yield "samples", expected["samples"], measured["samples"]
        for name in expected["values"].keys() | measured["values"].keys():
            yield name, expected["values"].get(name, math.nan), measured["values"].get(name, 0)
        for a, b in zip(expected["accuracies"], measured["accuracies"], strict=True):
            yield "accuracy", a, b


@contextmanager
def measured_through(measurements: Measurements) -> Iterator[None]:
    """The search's three kinds of measurement pass through `measurements` while it runs."""
    import model_explorer.operations.explore as explore_module
    import model_explorer.quantization.sensitivity as sensitivity
    from model_explorer.problems import Evaluation, Problem

    real_baseline = explore_module.measure_baseline
    real_alone = sensitivity._alone
    real_evaluate = Problem.evaluate

    def baseline(context):  # noqa: ANN001, ANN202
        return measurements.take("baseline", [float(a) for a in real_baseline(context)])

    def alone(model, batches, metric, name, bits):  # noqa: ANN001, ANN202
        measured = [name, bits, float(real_alone(model, batches, metric, name, bits))]
        return measurements.take("alone", measured, request=lambda row: row[:2])[2]

    def evaluate(self, genome, front=()):  # noqa: ANN001, ANN202
        configuration, evaluation = real_evaluate(self, genome, front)
        measured = {
            "configuration": configuration,
            "values": {k: float(v) for k, v in evaluation.values.items()},
            "accuracies": [float(a) for a in evaluation.accuracies],
            "complete": evaluation.complete,
            "finite": evaluation.finite,
            "samples": int(evaluation.extra["samples"]),
        }
        given = measurements.take("evaluations", measured, lambda e: e["configuration"])
        return configuration, Evaluation(
            dict(given["values"]),
            list(given["accuracies"]),
            complete=given["complete"],
            finite=given["finite"],
            seconds=evaluation.seconds,
            extra={**evaluation.extra, "samples": given["samples"]},
        )

    patches = [
        (explore_module, "measure_baseline", baseline),
        (sensitivity, "_alone", alone),
        (Problem, "evaluate", evaluate),
    ]
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    try:
        for owner, name, replacement in patches:
            setattr(owner, name, replacement)
        yield
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


def run_case(
    case: str, checkpoint: Path, folder: Path, recorded: dict[str, list] | None = None
) -> tuple[dict, Measurements]:
    """Calibrate (when the workload needs it) and explore, measuring through a Measurements
    (replaying `recorded` when given); the result as golden data, and the Measurements."""
    from model_explorer.cli import main
    from model_explorer.results import ExplorationResult

    path = case_workload(case, checkpoint, folder)
    if "calibration" in yaml.safe_load(path.read_text())["workload"]:
        assert main(["calibrate", "--if-missing", str(path)]) == 0
    output = folder / f"{case}.pkl"
    measurements = Measurements(recorded)
    with measured_through(measurements):
        assert main(["explore", str(path), "--output", str(output)]) == 0
    return golden_data(ExplorationResult.load(output)), measurements


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
        # `sensitivity`: the start's record kept for a resume (its table and seeds), newer
        # than the golden files; its seeds are in the first generation's individuals
        # held_out: the front scored after the search on other data (test_front_held_out.py)
        # baseline_outcomes: the float model's per-sample outcomes, a measurement (newer too)
        "stats": {
            k: v
            for k, v in result.stats.items()
            if k not in ("seconds", "sensitivity", "held_out", "baseline_outcomes")
        },
    }


@pytest.fixture(scope="module")
def golden_runs(trained_digits, tmp_path_factory) -> dict[str, tuple[dict, dict, Measurements]]:
    """Per case: (golden file, this search's result as golden data, its Measurements)."""
    _, checkpoint = trained_digits
    folder = tmp_path_factory.mktemp("golden")
    runs = {}
    for case in CASES:
        expected = json.loads((GOLDEN / f"{case}.json").read_text())
        actual, measurements = run_case(case, checkpoint, folder, expected["measurements"])
        runs[case] = (expected, actual, measurements)
    return runs


@pytest.mark.parametrize("case", CASES)
def test_a_seeded_search_reproduces_its_golden_file(case: str, golden_runs: dict) -> None:
    expected, actual, measurements = golden_runs[case]
    for kind, recorded in expected["measurements"].items():
        assert len(measurements.taken[kind]) == len(recorded), f"{case}: {kind} measurements"
    assert actual["variables"] == expected["variables"]
    assert actual["baseline"] == expected["baseline"]
    assert actual["generations"] == expected["generations"]
    assert actual["stats"] == expected["stats"]
    assert len(actual["individuals"]) == len(expected["individuals"])
    for got, want in zip(actual["individuals"], expected["individuals"], strict=True):
        where = f"{case} individual {want['id']}"
        for key in ("id", "generation", "configuration", "values", "accuracies"):
            assert got[key] == want[key], f"{where}: {key}"
        for key in ("feasible", "complete"):
            assert got[key] == want[key], f"{where}: {key}"
        assert got["genome"] == pytest.approx(want["genome"], rel=1e-12, abs=1e-15), where


@pytest.mark.parametrize("case", CASES)
def test_its_measurements_hold_on_this_processor(case: str, golden_runs: dict) -> None:
    _, _, measurements = golden_runs[case]
    flipped = set()
    for difference in measurements.differences:
        name, where = difference["value"], difference["where"]
        gap = abs(difference["measured"] - difference["recorded"])
        if name in ("complete", "samples") or name.startswith("accuracy"):
            flipped.add(where)
            # the accuracies of a candidate rejected at another batch are not comparable
            assert (
                not name.startswith("accuracy")
                or gap <= ONE_SAMPLE + 1e-12
                or any(
                    d["where"] == where and d["value"] == "complete"
                    for d in measurements.differences
                )
            ), f"{case}: {difference}"
        else:
            assert name in BLOCKS, f"{case}: {difference} (a value known without the model)"
            if name in RELATIVE:
                gap /= max(abs(difference["recorded"]), 1e-12)
            if name == "kl" and gap > BLOCKS[name]:
                flipped.add(where)  # a sample's output moved: see KL_EDGE
                assert gap <= KL_EDGE, f"{case}: {difference}"
                continue
            assert gap <= BLOCKS[name] + 1e-12, f"{case}: {difference}"
    assert len(flipped) <= MAY_FLIP * measurements.compared, (
        f"{case}: {len(flipped)} of {measurements.compared} measurements differ in an accuracy "
        f"or where early rejection stopped: {measurements.differences}"
    )


def _write_golden_files(cases: list[str]) -> None:
    """Record `cases` on the shipped checkpoint."""
    import tempfile

    sys.path.insert(0, str(REPOSITORY / "tests"))
    from conftest import DIGITS_CHECKPOINT

    with tempfile.TemporaryDirectory() as name:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        for case in cases:
            found, measurements = run_case(case, DIGITS_CHECKPOINT, Path(name))
            found["measurements"] = measurements.taken
            (GOLDEN / f"{case}.json").write_text(json.dumps(found, indent=1) + "\n")
            print(f"wrote {GOLDEN / case}.json: {len(found['individuals'])} individuals")


if __name__ == "__main__":
    unknown = [case for case in sys.argv[2:] if case not in CASES]
    if sys.argv[1:2] != ["--write"] or unknown:
        sys.exit(f"usage: python tests/exploration/test_golden.py --write [{' '.join(CASES)}]")
    _write_golden_files(sys.argv[2:] or list(CASES))
