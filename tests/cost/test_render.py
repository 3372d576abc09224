"""The cost table as printed and plotted: a legend that names the columns the table shows,
times that are medians over repeated runs, and a plot that stays readable on a large model."""

from __future__ import annotations

import re
from pathlib import Path

import torch
import torchvision
from PIL import Image

from model_explorer.cost.analyze import analyze_cost
from model_explorer.cost.render import conventions_text, cost_frame, layer_figure, plot_layers
from model_explorer.models import create_model


def test_the_legend_names_every_column_the_table_shows() -> None:
    report = analyze_cost(create_model("digits_cnn"), (1, 1, 8, 8), repeats=1)
    shown = [c for c in cost_frame(report).columns if c not in ("name", "module_type")]
    legend = re.findall(r"^  (\w+):", conventions_text(), flags=re.MULTILINE)
    assert set(legend) == set(shown) - {"operation", "operator"}


def test_times_are_the_median_of_the_timed_runs_after_a_warm_up() -> None:
    model = create_model("digits_cnn")
    calls = []
    model.register_forward_hook(lambda *_: calls.append(1))
    report = analyze_cost(model, (1, 1, 8, 8), repeats=3)
    assert len(calls) == 4  # one untimed, three timed
    assert all(row.seconds > 0 for row in report.rows)


def test_the_plot_of_a_large_model_keeps_the_largest_and_sums_the_rest(tmp_path: Path) -> None:
    model = torchvision.models.resnet18(num_classes=10)
    report = analyze_cost(model, torch.zeros(1, 3, 32, 32), repeats=1)
    path = plot_layers(report, tmp_path / "cost.png", top=10)
    width, _ = Image.open(path).size
    assert width <= 16 * 120  # at most 16 inches at the plot's 120 dpi
    figure = layer_figure(report, top=10)
    labels = [label.get_text() for label in figure.axes[1].get_xticklabels()]
    assert len(figure.axes[0].patches) == 11 and labels[-1].startswith("others (")
    frame = report.to_dataframe()
    frame = frame.assign(memory=frame["read_bytes"] + frame["write_bytes"])
    largest = frame.sort_values(["macs", "memory"], ascending=False, kind="stable").index[:10]
    assert labels[:-1] == list(frame.loc[sorted(largest), "name"])  # in execution order
