"""Metrics of the user's code (`metric: package.module:Class`): the way to bring an accuracy the
original tool had as its own function (YOLOP's, YOLOv5's). The classes below are the test's own,
written without this project's Metric base class; the built-in top-1 is the oracle: a search
scored by the user's top-1 must record exactly what the built-in one records, early rejections
included."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml

from model_explorer.cli import main
from model_explorer.errors import UserError
from model_explorer.metrics.functions import MetricSpec, create_metric
from model_explorer.results import ExplorationResult

MODULE = '''
class Top1:
    """Share of samples whose highest score is the label; exact bound for early rejection."""

    def __init__(self, scale=1.0):
        self.scale, self.right, self.seen = scale, 0, 0

    def update(self, output, target):
        self.right += int((output.argmax(dim=1) == target).sum())
        self.seen += len(target)

    def compute(self):
        return self.scale * self.right / self.seen

    def upper_bound(self, remaining):
        return self.scale * (self.right + remaining) / (self.seen + remaining)


class ErrorRate(Top1):
    higher_is_better = False

    def compute(self):
        return 1.0 - super().compute()


class NoCompute:
    def update(self, output, target):
        pass


class Refuses:
    def __init__(self, iou_threshold):
        raise ValueError("iou_threshold must lie in (0, 1)")
'''


@pytest.fixture
def user_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "my_metrics.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("my_metrics", None)


def test_a_metric_class_of_the_users_scores_as_the_builtin_one(user_code: Path) -> None:
    generator = torch.Generator().manual_seed(0)
    output, target = torch.randn(50, 10, generator=generator), torch.randint(0, 10, (50,))
    builtin, ours = create_metric("top1"), create_metric("my_metrics:Top1")
    for start in range(0, 50, 16):
        builtin.update(output[start : start + 16], target[start : start + 16])
        ours.update(output[start : start + 16], target[start : start + 16])
    assert ours.compute() == builtin.compute()
    assert ours.upper_bound(10) == builtin.upper_bound(10)
    assert ours.higher_is_better and not ours.needs_reference
    assert not create_metric("my_metrics:ErrorRate").higher_is_better


def test_keys_beside_type_are_the_constructors_arguments(user_code: Path) -> None:
    metric = create_metric(MetricSpec.model_validate({"type": "my_metrics:Top1", "scale": 0.5}))
    metric.update(torch.eye(4), torch.arange(4))
    assert metric.compute() == 0.5


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("my_metrics:NoCompute", "metric 'my_metrics:NoCompute' has no compute()"),
        ("my_metrics:Refuses", "ValueError: iou_threshold must lie in (0, 1)"),
        ("my_metrics:Missing", "module 'my_metrics' has no attribute 'Missing'"),
    ],
)
def test_a_broken_metric_class_is_one_sentence(user_code: Path, spec: str, says: str) -> None:
    with pytest.raises(UserError) as caught:
        keys = {"iou_threshold": 2.0} if "Refuses" in spec else {}
        create_metric(MetricSpec.model_validate({"type": spec, **keys}))
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_a_search_scored_by_the_users_top1_records_what_the_builtin_records(
    user_code: Path, trained_digits
) -> None:
    workload_file, _ = trained_digits
    data = yaml.safe_load(Path(workload_file).read_text())
    workload = data["workload"]
    workload["calibration"]["file"] = str(user_code / "calibration.pt")
    workload["exploration"]["nsga"].update(pop_size=6, offsprings=4, generations=2)
    workload["exploration"]["strategy"] = "nsga2"
    # both ranked by the metric (`auto` ranks the built-in top-1 by the divergence from the
    # float model, a metric of the user's by itself)
    workload["problem"]["selection"] = "accuracy"
    results = {}
    for name in ("top1", "my_metrics:Top1"):
        workload["metric"] = name
        path = user_code / f"{name.replace(':', '_')}.yaml"
        path.write_text(yaml.safe_dump(data))
        assert main(["calibrate", "--if-missing", str(path)]) == 0
        output = user_code / f"{name.replace(':', '_')}.pkl"
        assert main(["explore", str(path), "--output", str(output)]) == 0
        results[name] = ExplorationResult.load(output)
    ours, builtin = results["my_metrics:Top1"], results["top1"]
    assert ours.problem["metric"] == "my_metrics:Top1"
    assert len(ours.individuals) == len(builtin.individuals)
    for a, b in zip(ours.individuals, builtin.individuals, strict=True):
        assert a.configuration == b.configuration
        assert a.values == b.values and a.complete == b.complete


def test_an_original_accuracy_function_without_counterpart_names_the_way_to_bring_it(
    tmp_path: Path, capsys
) -> None:
    data = yaml.safe_load((Path(__file__).parents[1] / "workloads/digits_cnn.yaml").read_text())
    data["workload"]["model"]["accuracy_function"] = "yolop_combined_accuracy"
    data["workload"].pop("metric", None)
    path = tmp_path / "yolop.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", str(path)]) == 2
    assert "'package.module:Class'" in capsys.readouterr().err
