"""`model-explorer explore` and `evaluate-individual` end to end on the trained digits model."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from model_explorer.cli import main
from model_explorer.results import ExplorationResult
from tests_support import without_times


@pytest.fixture
def small_workload(trained_digits, tmp_path: Path) -> Path:
    workload_file, checkpoint = trained_digits
    data = yaml.safe_load(workload_file.read_text())
    data["workload"]["model"]["weights"] = str(checkpoint)
    data["workload"]["calibration"]["file"] = str(tmp_path / "c.pt")
    data["workload"]["exploration"]["nsga"].update(pop_size=8, offsprings=6, generations=3)
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["calibrate", str(path)]) == 0
    return path


def test_explore_writes_a_result_and_prints_the_front(small_workload: Path, capsys) -> None:
    output = small_workload.parent / "result.pkl"
    assert main(["explore", str(small_workload), "--output", str(output)]) == 0
    printed = capsys.readouterr().out
    result = ExplorationResult.load(output)
    assert result.complete
    assert f"{result.stats['evaluations']} evaluations" in printed
    assert "Pareto front:" in printed and f"result: {output}" in printed
    # the default start (auto: sensitivity seeds) counts the table's and its bisection's
    # forwards: one evaluation per quantizer, the float one, at most one more per quantizer
    # for the second table (two bits wider) and at most log2 of the path's
    seeding = result.stats["sensitivity_forwards"]
    samples = max(r["extra"]["samples"] for r in result.records)  # the exploration subset
    assert 11 * samples < seeding <= (11 + 10 + 6) * samples  # 10 quantizers, 2-8 bits: 60 steps
    forwards = sum(r["extra"]["samples"] for r in result.records) + seeding
    assert f"cost: {forwards:,} sample-forwards ({seeding:,} for the sensitivity seeds" in printed
    assert "(strategy surrogate)" in printed
    # The default strategy evaluates the first population, then at most 4 of the offspring
    # its surrogate screens per generation.
    assert 8 < len(result) <= 8 + 3 * 4
    assert result.workload["workload"]["model"]["type"] == "digits_cnn"
    assert len(result.baseline) == 1 and result.baseline[0] > 0.95
    minimum = result.problem["constraints"][0]
    assert minimum["name"] == "accuracy" and minimum["minimum"] == pytest.approx(
        0.98 * result.baseline[0]
    )
    # Existing results are never overwritten; a complete one is not resumed.
    assert main(["explore", str(small_workload), "--output", str(output)]) == 2
    assert main(["explore", str(small_workload), "--output", str(output), "--resume"]) == 2
    assert "already complete" in capsys.readouterr().err

    csv = small_workload.parent / "best.csv"
    assert (
        main(
            [
                "evaluate-individual",
                str(small_workload),
                str(output),
                "-n",
                "3",
                "--output",
                str(csv),
            ]
        )
        == 0
    )
    table = pd.read_csv(csv)
    assert len(table) == 3 and table["reevaluation_accuracy"].between(0, 1).all()
    assert table["weighted_bits"].is_monotonic_increasing
    assert set(table["id"]) <= {i.id for i in result.feasible()}


def test_skip_baseline_needs_a_minimum_accuracy(small_workload: Path, capsys) -> None:
    status = main(
        [
            "explore",
            str(small_workload),
            "--skip-baseline",
            "--output",
            str(small_workload.parent / "r.pkl"),
        ]
    )
    assert status == 2
    assert "allowable_accuracy_drop needs the baseline accuracy" in capsys.readouterr().err


def test_single_objective_form_of_the_original(small_workload: Path) -> None:
    data = yaml.safe_load(small_workload.read_text())
    problem = data["workload"]["problem"]
    problem["objectives"] = ["weighted_bits"]
    problem.pop("allowable_accuracy_drop")
    problem["minimum_accuracy"] = 0.9
    problem["bit_weighting_function"] = "bits_weighted_per_layer"
    small_workload.write_text(yaml.safe_dump(data))
    output = small_workload.parent / "single.pkl"
    assert main(["explore", str(small_workload), "--skip-baseline", "--output", str(output)]) == 0
    result = ExplorationResult.load(output)
    front = result.pareto_front()
    best = min(i.values["weighted_bits"] for i in result.feasible())
    assert {i.values["weighted_bits"] for i in front} == {best}
    assert all(i.values["accuracy"] >= 0.9 for i in result.feasible())


def test_interrupted_digits_search_resumes_to_the_same_result(
    small_workload: Path, monkeypatch, capsys
) -> None:
    """The printed command reproduces the run, its --set included; resuming without that
    setting is refused naming the key with both values."""
    import shlex

    from model_explorer.exploration.explorer import Explorer

    setting = ["--set", "exploration.nsga.offsprings=5"]
    whole = small_workload.parent / "whole.pkl"
    assert main(["explore", str(small_workload), *setting, "--output", str(whole)]) == 0
    original = Explorer._close_generation

    def interrupt_after_two(self, generation, algorithm):
        original(self, generation, algorithm)
        if generation == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(Explorer, "_close_generation", interrupt_after_two)
    cut = small_workload.parent / "cut.pkl"
    assert main(["explore", str(small_workload), *setting, "--output", str(cut)]) == 130
    said = capsys.readouterr().err
    command = said.partition("resume with `")[2].partition("`")[0]
    assert command == shlex.join(
        [
            "model-explorer",
            "explore",
            str(small_workload),
            *setting,
            "--resume",
            "--output",
            str(cut),
        ]
    )
    monkeypatch.setattr(Explorer, "_close_generation", original)
    assert main(["explore", str(small_workload), "--output", str(cut), "--resume"]) == 2
    assert "exploration.nsga.offsprings: 5 in the result, 6 here" in capsys.readouterr().err
    assert main(shlex.split(command)[1:]) == 0
    assert without_times(ExplorationResult.load(cut)) == without_times(
        ExplorationResult.load(whole)
    )


def test_a_search_stopped_in_its_sensitivity_start_resumes_without_measuring_again(
    small_workload: Path, monkeypatch, capsys
) -> None:
    """Ctrl-C while the second sensitivity table is measured: the first is in the result file
    already; the resume measures only the second and ends where an uninterrupted run ends."""
    import model_explorer.quantization.sensitivity as sensitivity

    whole = small_workload.parent / "whole.pkl"
    assert main(["explore", str(small_workload), "--output", str(whole)]) == 0
    measured = sensitivity.layer_sensitivity
    calls: list[int] = []

    def stopped_at_the_second(model, batches, metric, bits, *rest):
        calls.append(bits)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return measured(model, batches, metric, bits, *rest)

    monkeypatch.setattr(sensitivity, "layer_sensitivity", stopped_at_the_second)
    cut = small_workload.parent / "cut.pkl"
    assert main(["explore", str(small_workload), "--output", str(cut)]) == 130
    said = capsys.readouterr().err
    assert "the sensitivity start's measurements are saved in" in said and "--resume" in said
    kept = ExplorationResult.load(cut).stats["sensitivity"]
    assert list(kept["tables"]) == [str(calls[0])] and "seeds" not in kept

    calls.clear()
    monkeypatch.setattr(
        sensitivity, "layer_sensitivity", lambda *a: calls.append(a[3]) or measured(*a)
    )
    assert main(["explore", str(small_workload), "--output", str(cut), "--resume"]) == 0
    assert calls == [kept_bits + 2 for kept_bits in map(int, kept["tables"])]
    resumed, uninterrupted = ExplorationResult.load(cut), ExplorationResult.load(whole)
    assert without_times(resumed) == without_times(uninterrupted)


@pytest.mark.parametrize(
    ("genes", "pop_size", "algorithm", "refusal", "starts"),
    [
        (10, 16, "nsga2", None, False),  # the default workload: a random start pays more
        (16, 16, "nsga2", None, False),
        (17, 16, "nsga2", None, True),
        (44, 16, "nsga2", None, True),  # ResNet-20
        (44, 16, "random", None, False),  # random search takes no seeds
        (44, 16, "nsga2", "a sparsity problem", False),  # the problem cannot seed
    ],
)
def test_auto_starts_from_sensitivity_only_on_genomes_larger_than_the_population(
    default_workload_data: dict, genes: int, pop_size: int, algorithm: str, refusal, starts: bool
) -> None:  # noqa: ANN001
    from types import SimpleNamespace

    from model_explorer.operations.explore import sensitivity_start
    from model_explorer.workload.file import Workload

    exploration = default_workload_data["workload"]["exploration"]
    exploration["nsga"]["pop_size"] = pop_size
    exploration["algorithm"] = algorithm
    workload = Workload.from_dict(default_workload_data, check_paths=False)
    problem = SimpleNamespace(variables=[None] * genes, sensitivity_refusal=refusal)
    assert sensitivity_start(problem, workload) is starts
    if refusal is None and algorithm != "random":  # asked for, it starts whatever the size
        assert sensitivity_start(problem, workload, "sensitivity") is True


def test_the_cost_line_says_why_auto_took_no_sensitivity_start(searched) -> None:  # noqa: ANN001
    """The default search (10 genes, 16 first members) took no seeds; its cost line says why,
    and says nothing where the workload asked for a random start or the start was taken."""
    import copy

    from model_explorer.reports.text import cost_summary

    _, path = searched
    result = ExplorationResult.load(path)
    assert not result.stats.get("sensitivity_forwards")
    why = "auto: no sensitivity start with 10 genes and 16 first members"
    assert why in cost_summary(result)
    asked = copy.deepcopy(result)
    asked.workload["workload"]["exploration"]["initialization"] = "random"
    assert "sensitivity start" not in cost_summary(asked)
    seeded = copy.deepcopy(result)
    seeded.stats["sensitivity_forwards"] = 720
    assert "720 for the sensitivity seeds" in cost_summary(seeded)
    assert why not in cost_summary(seeded)
