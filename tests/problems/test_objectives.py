"""Objectives are a registry, each problem owns its settings, and the original layout of those
settings (in `exploration:` and `exploration.extra_args`) still loads with its meaning.

Oracles: hand computations of a plan's costs, a test's own objective registered from outside,
and the same search written in both layouts."""

from __future__ import annotations

import copy
import logging
import sys
from pathlib import Path

import pytest
import yaml
from bad_input_support import TINY, run_cli, write
from pydantic import ValidationError

from model_explorer.errors import WorkloadError
from model_explorer.operations.result_file import SearchDefinition
from model_explorer.plan import INPUT_BITS, WEIGHT_BITS
from model_explorer.problems import PROBLEMS
from model_explorer.problems.objectives import (
    NEEDS,
    OBJECTIVES,
    Measured,
    PlanCosts,
    register_objective,
    usable_objectives,
)
from model_explorer.problems.options import (
    JointOptions,
    QuantizationOptions,
    SparsityOptions,
    explored_bits,
)
from model_explorer.results import ExplorationResult
from model_explorer.workload.file import Workload


def new_layout(data: dict) -> dict:
    """TINY (written the original way) with its problem settings where they now belong."""
    data = copy.deepcopy(data)
    body = data["workload"]
    exploration = body["exploration"]
    problem = body.setdefault("problem", {})
    for key in ("minimum_accuracy", "early_reject"):
        problem[key] = exploration.pop(key)
    problem.update(exploration.pop("extra_args"))
    return data


def test_every_objective_is_computable_by_some_problem() -> None:
    provided = [set(entry.options.provides) for entry in PROBLEMS.entries()]
    for entry in OBJECTIVES.entries():
        assert entry.info.needs <= set(NEEDS)
        assert any(entry.info.needs <= given for given in provided), entry.name


def test_what_each_problem_can_weigh() -> None:
    assert usable_objectives(QuantizationOptions.provides) == [
        "accuracy",
        "bops",
        "energy",
        "latency",
        "model_size",
        "weighted_bits",
    ]
    assert usable_objectives(SparsityOptions.provides) == [
        "accuracy",
        "block_sparsity",
        "created_blocks",
    ]
    assert set(usable_objectives(JointOptions.provides)) == set(OBJECTIVES.names())


def test_plan_objectives_by_hand() -> None:
    class Sizes:  # two layers: 100 and 10 MACs, 20 and 5 weight elements
        def model_size(self, plan):  # noqa: ANN001, ANN202
            return 20 * plan["a"][WEIGHT_BITS] + 5 * plan["b"][WEIGHT_BITS]

        def bops(self, plan):  # noqa: ANN001, ANN202
            return sum(m * plan[n][INPUT_BITS] * plan[n][WEIGHT_BITS] for n, m in self.macs)

        def effective_bops(self, plan, kept):  # noqa: ANN001, ANN202
            return sum(
                m * plan[n][INPUT_BITS] * plan[n][WEIGHT_BITS] * kept.get(n, 1.0)
                for n, m in self.macs
            )

        macs = (("a", 100), ("b", 10))

    plan = {"a": {INPUT_BITS: 8, WEIGHT_BITS: 4}, "b": {INPUT_BITS: 2, WEIGHT_BITS: 6}}
    costs = PlanCosts(Sizes(), "bits_weighted_per_layer")
    measured = Measured(0.9, {"created_blocks": 3.0, "block_sparsity": 0.25}, {"a": 0.5})

    def value(name: str) -> float:
        return OBJECTIVES.get(name).builder(plan, costs, measured)

    assert value("weighted_bits") == 5.0 * (8 + 2) + 0.5 * (4 + 6)
    assert value("bops") == 100 * 8 * 4 + 10 * 2 * 6
    assert value("effective_bops") == 100 * 8 * 4 * 0.5 + 10 * 2 * 6
    assert value("model_size") == 20 * 4 + 5 * 6
    assert (value("accuracy"), value("created_blocks"), value("block_sparsity")) == (0.9, 3, 0.25)
    assert [n for n in OBJECTIVES.names() if OBJECTIVES.get(n).info.analytic] == [
        "bops",
        "energy",
        "latency",
        "model_size",
        "weighted_bits",
    ]


def explored(tiny: dict, folder: Path, capsys, objectives: list[str]) -> ExplorationResult:
    """The result of `explore` on the tiny workload with `objectives`."""
    data = new_layout(tiny)
    data["workload"]["problem"]["objectives"] = objectives
    path = write(data, folder / "w.yaml")
    output = folder / "r.pkl"
    assert run_cli(capsys, "explore", path, "--output", output, "-s").status == 0
    return ExplorationResult.load(output)


def test_an_objective_registered_from_outside_is_searched_and_recorded(
    tiny: dict, tmp_path: Path, capsys
) -> None:
    @register_objective("widest_weight", maximize=False, needs={"bits"}, description="test's")
    def widest(plan, costs, measured):  # noqa: ANN001, ANN202
        return float(max(s[WEIGHT_BITS] for s in plan.values()))

    try:
        result = explored(tiny, tmp_path, capsys, ["accuracy", "widest_weight"])
        assert dict(result.judged) == {"accuracy": True, "widest_weight": False}
        for individual in result.individuals:
            plan = result.plan_of(individual)
            expected = max(settings[WEIGHT_BITS] for settings in plan.values())
            assert individual.values["widest_weight"] == expected
            assert "weighted_bits" in individual.values  # every computable one is recorded
    finally:
        OBJECTIVES._entries.pop("widest_weight")


# A user's objective with an input no problem provides: one module, named in the workload.
LATENCY = '''"""Latency from a per-layer table: an objective with an input of its own."""

from model_explorer.plan import WEIGHT_BITS
from model_explorer.problems.objectives import objective

TABLES = []


def layer_latency(problem):
    """Nanoseconds per weight bit of each layer, computed once per problem."""
    TABLES.append(problem)
    return {name: float(index + 1) for index, name in enumerate(problem.model.layers)}


@objective(maximize=False, needs={"bits", layer_latency}, description="latency from a table")
def latency_ns(plan, costs, measured):
    table = costs.inputs["layer_latency"]
    return sum(table[layer] * settings[WEIGHT_BITS] for layer, settings in plan.items())


def unmarked(plan, costs, measured):
    return 0.0
'''


@pytest.fixture
def latency_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    folder = tmp_path / "user_code"
    folder.mkdir()
    (folder / "latency_objective.py").write_text(LATENCY)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, "latency_objective", raising=False)
    yield
    sys.modules.pop("latency_objective", None)


def test_a_users_objective_with_its_own_input_is_one_module(
    latency_module: None, tiny: dict, tmp_path: Path, capsys
) -> None:
    result = explored(tiny, tmp_path, capsys, ["accuracy", "latency_objective:latency_ns"])
    assert dict(result.judged) == {"accuracy": True, "latency_objective:latency_ns": False}
    tables = sys.modules["latency_objective"].TABLES
    assert len(tables) == 1  # the input is computed once per problem
    table = {name: index + 1.0 for index, name in enumerate(tables[0].model.layers)}
    for individual in result.individuals:
        plan = result.plan_of(individual)
        expected = sum(table[layer] * settings[WEIGHT_BITS] for layer, settings in plan.items())
        assert individual.values["latency_objective:latency_ns"] == expected
        assert "weighted_bits" in individual.values


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("latency_objective:latency_s", "module 'latency_objective' has no attribute 'latency_s'"),
        ("latency_objective:unmarked", "'latency_objective:unmarked' is not marked as an"),
        ("no_such_module:latency_ns", "cannot import 'no_such_module'"),
    ],
)
def test_a_wrong_user_objective_is_one_sentence_naming_the_key(
    latency_module: None, name: str, words: str, tmp_path: Path, capsys
) -> None:
    data = new_layout(TINY)
    data["workload"]["problem"]["objectives"] = ["accuracy", name]
    run_cli(capsys, "validate", write(data, tmp_path / "w.yaml")).one_error(
        "workload.problem.objectives:", words
    )


@pytest.mark.parametrize(
    ("problem", "objectives", "words"),
    [
        ("sparsity_problem", ["accuracy", "bops"], "['bops'] cannot be used with this problem"),
        ("quantization_problem", ["accuracy", "throughput"], "['throughput'] cannot be used"),
        ("quantization_problem", ["accurcy"], "(did you mean 'accuracy'?)"),
    ],
)
def test_an_objective_the_problem_cannot_compute_is_refused_at_validate(
    problem: str, objectives: list[str], words: str, tmp_path: Path, capsys
) -> None:
    data = new_layout(TINY)
    settings = data["workload"]["problem"]
    settings.update(problem_function=problem, objectives=objectives)
    if problem == "sparsity_problem":
        for key in ("num_bits_lower_limit", "num_bits_upper_limit"):
            settings.pop(key)
    run_cli(capsys, "validate", write(data, tmp_path / "w.yaml")).one_error(
        "workload.problem.objectives:", words
    )


def test_a_setting_of_another_problem_is_named_as_such(tmp_path: Path, capsys) -> None:
    data = new_layout(TINY)
    data["workload"]["problem"]["threshold_limit"] = 0.5
    run_cli(capsys, "validate", write(data, tmp_path / "w.yaml")).one_error(
        "workload.problem.threshold_limit: only the quantization_sparsity_problem and "
        "sparsity_problem problem functions take 'threshold_limit'"
    )


def test_both_layouts_of_one_setting_are_refused(tmp_path: Path, capsys) -> None:
    data = new_layout(TINY)
    data["workload"]["exploration"]["layer_bounds"] = {"0.*": [8, 8]}
    data["workload"]["problem"]["layer_bounds"] = {"0.*": [6, 8]}
    run_cli(capsys, "validate", write(data, tmp_path / "w.yaml")).one_error(
        "workload.exploration.layer_bounds: is the original spelling of "
        "workload.problem.layer_bounds, which the file gives too; keep one"
    )


def test_the_original_layout_means_the_same_workload(tmp_path: Path) -> None:
    old = Workload.from_dict(TINY, check_paths=False)
    new = Workload.from_dict(new_layout(TINY), check_paths=False)
    assert old == new
    assert old.problem.options.bits == (2, 8) and explored_bits(old.problem.options) == (2, 8)
    assert explored_bits(SparsityOptions()) is None
    # Where each setting was written, as messages name it.
    assert old.problem.options.key("early_reject") == "workload.exploration.early_reject"
    assert old.key("problem.num_bits_upper_limit") == (
        "workload.exploration.extra_args.num_bits_upper_limit"
    )
    assert new.problem.options.key("early_reject") == "workload.problem.early_reject"
    # A result stored in the original layout is the same search as the new spelling of it,
    # and another search is not.
    assert SearchDefinition.of(new).matches(TINY)
    changed = new_layout(TINY)
    changed["workload"]["problem"]["num_bits_upper_limit"] = 7
    assert not SearchDefinition.of(Workload.from_dict(changed, check_paths=False)).matches(TINY)


def test_settings_of_other_problems_in_extra_args_are_set_aside_as_the_original_did(
    caplog,
) -> None:
    data = copy.deepcopy(TINY)
    data["workload"]["exploration"]["extra_args"].update(
        threshold_limit=0.8, discrete_threshold_steps=100, block_size=[4, 4]
    )
    with caplog.at_level(logging.INFO, logger="model_explorer.workload.file"):
        workload = Workload.from_dict(data, check_paths=False)
    assert workload.sparsity.block_size == (4, 4)
    (line,) = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert "workload.exploration.extra_args.threshold_limit" in line
    assert "quantization_problem does not use them" in line
    # Still a value no problem could use is refused where it was written.
    data["workload"]["exploration"]["extra_args"]["discrete_threshold_steps"] = 0
    with pytest.raises(WorkloadError, match="extra_args.discrete_threshold_steps: must be a pos"):
        Workload.from_dict(data, check_paths=False)


def test_an_unknown_key_left_in_extra_args_is_named() -> None:
    data = copy.deepcopy(TINY)
    data["workload"]["exploration"]["extra_args"]["num_bits_lower_limt"] = 3
    with pytest.raises(WorkloadError) as error:
        Workload.from_dict(data, check_paths=False)
    assert "workload.exploration.extra_args.num_bits_lower_limt: unknown key (did you mean " in (
        str(error.value)
    )


def test_options_check_their_own_values() -> None:
    with pytest.raises(ValidationError, match="reach outside the explored range 4-8"):
        QuantizationOptions(num_bits_upper_limit=8, layer_bounds={"x": (2, 8)})
    with pytest.raises(ValidationError, match=r"\[0.5\] lie above threshold_limit \(0.2\)"):
        SparsityOptions(threshold_limit=0.2, predefined_parameters=[0.1, 0.5])
    # The joint problem checks both genomes' settings.
    with pytest.raises(ValidationError, match="lie above threshold_limit"):
        JointOptions(threshold_limit=0.2, predefined_parameters=[0.5])
    with pytest.raises(ValidationError, match="is above num_bits_upper_limit"):
        JointOptions(num_bits_lower_limit=9, num_bits_upper_limit=8)
    assert QuantizationOptions().chosen_objectives == ["accuracy", "weighted_bits"]
    assert JointOptions().chosen_objectives == ["accuracy", "effective_bops"]


def test_the_shipped_workloads_use_the_problem_section() -> None:
    for path in sorted((Path(__file__).parents[2] / "workloads").glob("*.yaml")):
        body = yaml.safe_load(path.read_text())["workload"]
        exploration = body.get("exploration") or {}
        assert "extra_args" not in exploration, path.name
        assert not {"objectives", "layer_bounds", "minimum_accuracy"} & set(exploration)
