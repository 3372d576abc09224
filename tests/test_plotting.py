"""Figures render headless with the expected artists; pgfplots files; notebooks; the report."""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path

import matplotlib
import nbformat
import pytest
import yaml

from conftest import REPOSITORY
from model_explorer.cli import main
from model_explorer.cost.energy.analytic import analytic_energy
from model_explorer.exploration import Explorer
from model_explorer.exploration.spec import NSGASpec
from model_explorer.models import create_model
from model_explorer.reports import plots as plotting
from model_explorer.results import ExplorationResult, samples_of
from tests_support import Synthetic, notebook_project, run_in_project

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _close_figures():  # noqa: ANN202
    """Each test's figures are closed after it, as a script that saves them would."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


@pytest.fixture(scope="module")
def synthetic() -> ExplorationResult:
    return Explorer(Synthetic(), NSGASpec(pop_size=10, offsprings=8, generations=3), seed=0).run()


def artists(figure, gid: str) -> list:
    return [a for a in figure.findobj() if getattr(a, "get_gid", lambda: None)() == gid]


def test_front_plot_has_points_front_and_constraint(synthetic) -> None:
    figure = plotting.plot_front(synthetic)
    assert artists(figure, "points-feasible") and artists(figure, "points-infeasible")
    (front,) = artists(figure, "front")
    expected = plotting.front_points(synthetic, "bits", "accuracy")
    assert [tuple(p) for p in front.get_xydata()] == expected
    (constraint,) = artists(figure, "constraint")
    assert constraint.get_ydata()[0] == 0.6  # the Synthetic problem's minimum accuracy


def test_the_front_plot_shows_the_front_on_held_out_data(synthetic) -> None:
    assert not artists(plotting.plot_front(synthetic), "held-out")  # none recorded: none drawn
    result = copy.deepcopy(synthetic)
    front = result.pareto_front()
    scores = {member.id: 0.5 + member.id / 1000 for member in front}
    for member in front:
        member.extra["held_out"] = scores[member.id]
    result.stats["held_out"] = {"baseline": 0.77, "data": "d", "samples": 1, "members": 1}
    figure = plotting.plot_front(result)
    (points,) = artists(figure, "held-out")
    drawn = sorted(tuple(point) for point in points.get_offsets())
    assert drawn == sorted((m.values["bits"], scores[m.id]) for m in front)
    (baseline,) = artists(figure, "held-out-baseline")
    assert baseline.get_ydata()[0] == 0.77


def test_layer_convergence_and_energy_plots(synthetic) -> None:
    layers = plotting.plot_layers(synthetic)
    bars = artists(layers, "bars-threshold")  # synthetic genes are not quantizers: one bar each
    assert len(bars) == 6
    best = synthetic.pareto_front()[0]
    one = plotting.plot_layers(synthetic, best)
    assert [p.get_height() for p in artists(one, "bars-threshold")] == best.configuration
    convergence = plotting.plot_convergence(synthetic)
    (line,) = artists(convergence, "hypervolume")
    assert len(line.get_xdata()) == 4
    efficiency = plotting.plot_efficiency(synthetic)
    (step,) = artists(efficiency, "hypervolume-samples")
    assert [tuple(p) for p in step.get_xydata()] == synthetic.hypervolume_by_samples(
        normalised=True
    )
    assert not artists(efficiency, "sensitivity-seeds")  # a random start spent nothing before
    # a seeded start: what its table spent is shaded from 0, the steps start after it
    started = copy.copy(synthetic)
    started.stats = {**synthetic.stats, "sensitivity_forwards": 700}
    seeded = plotting.plot_efficiency(started)
    (span,) = artists(seeded, "sensitivity-seeds")
    assert span.get_x() == 0 and span.get_width() == 700
    (step,) = artists(seeded, "hypervolume-samples")
    assert step.get_xdata()[0] == 700 + samples_of(synthetic.records[0])
    rows = analytic_energy(create_model("digits_cnn").eval(), __import__("torch").zeros(1, 1, 8, 8))
    energy = plotting.plot_dram_energy(rows)
    stacks = [artists(energy, f"energy-{kind}") for kind in ("weights", "inputs", "outputs")]
    tops = [sum(stack[i].get_height() for stack in stacks) for i in range(len(rows))]
    assert tops == pytest.approx([r.total_dram_energy / 1e6 for r in rows])


def test_pgfplots_pairs(synthetic, tmp_path: Path) -> None:
    dat, tex = plotting.front_to_pgfplots(synthetic, tmp_path / "front")
    lines = dat.read_text().splitlines()
    assert lines[0] == "bits accuracy"
    points = [float(v) for line in lines[1:] for v in line.split()]
    expected = [v for point in plotting.front_points(synthetic, "bits", "accuracy") for v in point]
    assert points == pytest.approx(expected)
    assert "\\addplot[const plot" in tex.read_text() and "{front.dat}" in tex.read_text()
    dat, tex = plotting.layers_to_pgfplots(synthetic, tmp_path / "layers")
    assert len(dat.read_text().splitlines()) == 1 + 6 and "ybar" in tex.read_text()


@pytest.fixture(scope="module")
def digits_result(trained_digits, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("explored")
    _, checkpoint = trained_digits
    data = yaml.safe_load((REPOSITORY / "workloads" / "digits_cnn.yaml").read_text())
    data["workload"]["model"]["weights"] = str(checkpoint)
    data["workload"]["calibration"]["file"] = str(folder / "c.pt")
    data["workload"]["exploration"]["nsga"].update(pop_size=8, offsprings=8, generations=2)
    workload = folder / "w.yaml"
    workload.write_text(yaml.safe_dump(data))
    assert main(["calibrate", str(workload)]) == 0
    assert main(["explore", str(workload), "--output", str(folder / "result.pkl")]) == 0
    return folder / "result.pkl"


@pytest.mark.parametrize("name", ["visualize_individuals", "dram_accesses"])
def test_notebooks_run_top_to_bottom(
    name: str, digits_result: Path, tmp_path: Path, monkeypatch
) -> None:
    """As a user runs them after `make run`: the kernel started in evaluation_scripts/ of a
    project whose results/ holds the result, no RESULTS_FILE, no display (a remote
    JupyterLab); the figures must come back inline."""
    path = REPOSITORY / "evaluation_scripts" / f"{name}.ipynb"
    notebook = nbformat.read(path, as_version=4)
    # Stored without outputs.
    assert all(
        not cell.get("outputs") and not cell.get("execution_count")
        for cell in notebook.cells
        if cell.cell_type == "code"
    )
    project = notebook_project(tmp_path)
    shutil.copy(digits_result, project / "results" / "expl_digits.pkl")
    for variable in ("RESULTS_FILE", "DRAM_CSV", "DISPLAY", "MPLBACKEND"):
        monkeypatch.delenv(variable, raising=False)
    text = run_in_project(notebook, project)
    expected = "feasible" if name == "visualize_individuals" else "total DRAM energy"
    assert expected in text and "expl_digits.pkl" in text
    images = [
        output
        for cell in notebook.cells
        for output in cell.get("outputs", [])
        if "image/png" in output.get("data", {})
    ]
    assert len(images) >= FIGURES[name], len(images)


# The figures each notebook draws (visualize_individuals: front, layers, convergence, hypervolume;
# dram_accesses: the per-layer energy).
FIGURES = {"visualize_individuals": 3, "dram_accesses": 1}


def test_results_are_found_from_a_folder_below_the_project(tmp_path: Path, monkeypatch) -> None:
    from model_explorer.results import latest_result

    monkeypatch.delenv("RESULTS_FILE", raising=False)
    (tmp_path / "results").mkdir()
    (tmp_path / "evaluation_scripts").mkdir()
    older, newer = tmp_path / "results" / "expl_a.pkl", tmp_path / "results" / "expl_b.pkl"
    older.write_bytes(b"")
    newer.write_bytes(b"")
    os.utime(older, (1, 1))
    assert latest_result(start=tmp_path / "evaluation_scripts") == newer
    monkeypatch.setenv("RESULTS_FILE", str(older))
    assert latest_result(start=tmp_path / "evaluation_scripts") == older
    monkeypatch.delenv("RESULTS_FILE")
    with pytest.raises(FileNotFoundError, match="run `make run`"):
        latest_result(start=tmp_path / "evaluation_scripts", pattern="none_*.pkl")


def test_report_writes_every_file_it_lists(digits_result: Path, capsys) -> None:
    out = digits_result.parent / "report"
    assert main(["report", str(digits_result), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    report = (out / "report.md").read_text()
    listed = report.split("Files: ")[1].strip().replace("`", "").split(", ")
    assert listed and all(
        (out / name).is_file() and (out / name).stat().st_size > 0 for name in listed
    )
    assert {"front.png", "layers.png", "convergence.png", "front.dat", "front.tex"} <= set(listed)
    assert "efficiency.png" in listed
    result = ExplorationResult.load(digits_result)
    seeding = result.stats.get("sensitivity_forwards", 0)  # the default start's table
    forwards = sum(r["extra"]["samples"] for r in result.records) + seeding
    assert f"- cost: {forwards:,} sample-forwards" in report
    assert f"evaluations: {len(result)}, feasible: {len(result.feasible())}" in report
    assert "## Pareto front" in report and f"report: {out / 'report.md'}" in printed
    assert os.path.getsize(out / "front.png") > 1000


def test_generations_are_whole_numbers_and_layers_are_labelled(synthetic) -> None:
    """A short search's convergence plot must not put ticks at generation 2.5."""
    convergence = plotting.plot_convergence(synthetic)
    convergence.canvas.draw()
    ticks = convergence.axes[0].get_xticks()
    assert all(float(t).is_integer() for t in ticks), ticks
    assert plotting.plot_layers(synthetic).axes[0].get_xlabel() == "layer"


def test_layers_named_by_position_are_labelled_with_their_type(digits_result: Path) -> None:
    """digits_cnn is an nn.Sequential: its layers are 0, 3, 7, 12, 14; the search records
    their types, so the figure says 0:Conv2d ... 14:Linear."""
    result = ExplorationResult.load(digits_result)
    labels = [t.get_text() for t in plotting.plot_layers(result).axes[0].get_xticklabels()]
    assert labels == ["0:Conv2d", "3:Conv2d", "7:Conv2d", "12:Linear", "14:Linear"]


def test_one_hypervolume_from_the_problem_alone_in_the_api_report_and_plots(
    digits_result: Path, tmp_path: Path
) -> None:
    """The reference point is the problem's (the minimum accuracy; 10 quantizers at 8 bits =
    80 weighted bits), the front's area above it is computed here by a sweep, and the box to
    (accuracy 1, cost 0) normalises it; report.md and convergence.png give the same number."""
    from model_explorer.reports.text import write_report

    result = ExplorationResult.load(digits_result)
    minimum = next(c["minimum"] for c in result.problem["constraints"] if c["name"] == "accuracy")
    reference = result.default_reference()
    assert reference == {"accuracy": minimum, "weighted_bits": 80.0}
    points = sorted((i.values["weighted_bits"], i.values["accuracy"]) for i in result.feasible())
    area, best = 0.0, minimum
    for (cost, accuracy), following in zip(points, [*points[1:], (80.0, None)], strict=True):
        best = max(best, accuracy)
        area += (min(following[0], 80.0) - min(cost, 80.0)) * (best - minimum)
    expected = area / ((1.0 - minimum) * 80.0)
    assert abs(result.normalised_hypervolume() - expected) < 1e-9
    history = result.hypervolume_by_generation(normalised=True)
    assert abs(history[-1][1] - expected) < 1e-9
    write_report(result, tmp_path / "report")
    assert (
        f"hypervolume (normalised): {expected:.4f}"
        in (tmp_path / "report" / "report.md").read_text()
    )


def test_the_front_tells_candidates_stopped_early_apart(synthetic) -> None:
    """A candidate stopped early has a bound for a score: its own marker, not 'infeasible';
    the axis names the objective and its metric as the tables do."""
    stopped = copy.copy(synthetic)
    infeasible = [i.id for i in synthetic.individuals if not i.feasible][:3]
    stopped.records = [
        {**record, "complete": False} if record["id"] in infeasible else record
        for record in synthetic.records
    ]
    stopped.problem = {**synthetic.problem, "metric": "top1"}
    figure = plotting.plot_front(stopped)
    (early,) = artists(figure, "points-stopped early")
    assert len(early.get_offsets()) == len(infeasible)
    (rest,) = artists(figure, "points-infeasible")
    assert len(rest.get_offsets()) == sum(not i.feasible for i in synthetic.individuals) - 3
    assert figure.axes[0].get_ylabel() == "accuracy (top1)"


def test_a_formats_layer_plot_colours_each_bar_by_its_format(synthetic, monkeypatch) -> None:
    import pandas as pd
    from matplotlib.colors import to_hex

    table = pd.DataFrame(
        [
            ("a", "input", 8.0, 8.0, 8.0, "int8"),
            ("a", "weight", 8.0, 4.25, 8.0, "fp8_e4m3"),
            ("b", "input", 8.0, 8.0, 8.0, "fp8_e4m3"),
            ("b", "weight", 4.25, 4.25, 8.0, "mxfp4"),
        ],
        columns=["layer", "kind", "median", "min", "max", "format"],
    )
    monkeypatch.setattr(plotting, "_layer_table", lambda result, individual: table)
    figure = plotting.plot_layers(synthetic)
    colour = {}
    for kind in ("input", "weight"):
        for bar, (_, row) in zip(
            artists(figure, f"bars-{kind}"), table[table.kind == kind].iterrows(), strict=True
        ):
            colour.setdefault(row["format"], set()).add(to_hex(bar.get_facecolor()))
            assert bar.get_height() == row["median"]
            assert bool(bar.get_hatch()) == (kind == "weight")
    assert all(len(shades) == 1 for shades in colour.values())  # one colour per format
    assert len({next(iter(shades)) for shades in colour.values()}) == 3  # int8 unlike fp8
    legend = [text.get_text() for text in figure.axes[0].get_legend().get_texts()]
    assert legend == ["fp8_e4m3", "int8", "mxfp4", "input", "weight"]


def test_the_dram_plot_names_layers_as_the_table_does() -> None:
    import torch

    rows = analytic_energy(create_model("digits_cnn").eval(), torch.zeros(1, 1, 8, 8))
    axes = plotting.plot_dram_energy(rows).axes[0]
    ticks = [t.get_text() for t in axes.get_xticklabels()]
    assert ticks == [f"{r.layer_idx}: {r.layer_name} ({r.layer_type})" for r in rows]
    assert axes.get_xlabel() and "uJ" in axes.get_ylabel()
    total = sum(r.total_dram_energy for r in rows) / 1e6
    assert f"{total:.4g} uJ in all" in axes.get_title()


def test_compare_figures_show_top_k_and_every_bar() -> None:
    """agreement.png: top-1 above the diagonal, top-5 below; timing.png: a log axis where one
    environment is over 20 times faster, so its bar shows."""
    from types import SimpleNamespace

    from model_explorer.analysis.compare.comparison import Comparison
    from model_explorer.analysis.compare.render import plot_agreement, plot_timing

    runs = {
        name: SimpleNamespace(median_seconds_per_sample=seconds, seconds_per_sample=[seconds])
        for name, seconds in (("eager", 5.4e-3), ("onnxruntime", 1.4e-5))
    }
    pair = {"a": "eager", "b": "onnxruntime", "top1_agreement": 1.0, "top5_agreement": 0.54}
    comparison = Comparison(runs, {}, [pair], 10, 1, 1, 1e-4)  # type: ignore[arg-type]
    cells = {
        (round(t.get_position()[1]), round(t.get_position()[0])): t.get_text()
        for t in plot_agreement(comparison).axes[0].texts
    }
    assert cells[(0, 1)] == "1.000" and cells[(1, 0)] == "0.540"
    assert plot_timing(comparison).axes[0].get_yscale() == "log"


def test_the_front_plot_and_report_show_each_members_interval(digits_result: Path) -> None:
    """The default search keeps its front's per-sample outcomes: the plot draws each member's
    Wilson interval (checked against scipy's) on the data it was selected on and on the
    held-out data, and the report's table has both interval columns."""
    from scipy import stats

    from model_explorer.reports.text import pareto_table
    from model_explorer.results.statistics import unpack_hits

    result = ExplorationResult.load(digits_result)
    front = sorted(
        [i for i in result.pareto_front() if i.feasible], key=lambda i: i.values["weighted_bits"]
    )
    assert front and all("outcomes" in member.extra for member in front)
    figure = plotting.plot_front(result)
    (bars,) = [a for a in artists(figure, "intervals") if hasattr(a, "get_segments")]
    drawn = sorted(tuple(segment[:, 1]) for segment in bars.get_segments())
    expected = []
    for member in front:
        hits = unpack_hits(member.extra["outcomes"]["hits"])
        interval = stats.binomtest(int(hits.sum()), len(hits)).proportion_ci(method="wilson")
        expected.append((interval.low, interval.high))
    flat = [value for pair in drawn for value in pair]
    assert flat == pytest.approx([value for pair in sorted(expected) for value in pair], abs=1e-9)
    assert artists(figure, "intervals-held-out")
    header = pareto_table(result).splitlines()[0].split()
    assert "interval" in header and "held_out_interval" in header


def test_the_front_s_layer_bars_are_widths_its_members_have(synthetic) -> None:
    """Over the front each bar is the median member's setting (the lower middle one: a width
    some member has, where a mean of 2, 3, 8 and 8 would draw 5.25), its whiskers the lowest
    and highest setting of the front."""
    front = synthetic.pareto_front()
    table = synthetic.layer_statistics()
    for index, name in enumerate(synthetic.variable_names):
        settings = sorted(float(member.configuration[index]) for member in front)
        row = table[table["variable"] == name].iloc[0]
        assert row["median"] == settings[(len(settings) - 1) // 2]
        assert (row["min"], row["max"]) == (settings[0], settings[-1])
