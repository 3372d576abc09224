"""`model_explorer.search` and friends from research code: a search started from objects is
the search `explore` runs on the same settings from a file; models and loaders that exist only
here go through it; what comes back is scored and exported as the caller would check it; and
bad input is one sentence each."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import yaml
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import model_explorer
from conftest import write_workload
from model_explorer.cli import main
from model_explorer.errors import UserError
from model_explorer.results import ExplorationResult
from tests_support import without_times

SMALL = {"pop_size": 6, "offsprings": 6, "generations": 2}


def _records(result: ExplorationResult) -> list[dict]:
    keep = ("genome", "configuration", "values", "feasible", "complete", "plan")
    return [{k: r[k] for k in keep} for r in without_times(result)["individuals"]]


def test_a_search_from_python_is_the_search_of_the_workload_file(trained_digits, tmp_path) -> None:
    """digits_cnn with its shipped settings (a shorter search), once by `explore` on the
    file and once by `search` on the model and loaders the file describes: the same
    individuals, evaluated alike, and the same front scored alike on the held-out data."""
    from model_explorer.datasets import build_loader
    from model_explorer.models import build_model
    from model_explorer.workload.file import Workload

    workload_file, _ = trained_digits
    data = yaml.safe_load(workload_file.read_text())
    body = data["workload"]
    body["exploration"]["nsga"].update(SMALL)
    body["calibration"]["file"] = str(tmp_path / "cli_calibration.pt")
    path = write_workload(data, tmp_path / "digits.yaml")
    assert main(["calibrate", str(path)]) == 0
    assert main(["explore", str(path), "--output", str(tmp_path / "cli.pkl")]) == 0

    workload = Workload.load(path)
    model = build_model(workload.model, fold=False)
    seed = workload.seed
    calibration = build_loader(workload.calibration.datasets.calibrate, seed, "calibrate")
    exploration = build_loader(workload.exploration.datasets.exploration, seed, "exploration")
    held_out = build_loader(workload.reevaluation.datasets.reevaluate, seed, "reevaluate")
    settings = copy.deepcopy(body)
    for section in ("model", "retraining", "reevaluation"):
        settings.pop(section)
    settings["calibration"].pop("datasets")
    settings["calibration"].pop("file")
    settings["exploration"].pop("datasets")
    settings["model"] = {"fold_batchnorm": workload.model.fold_batchnorm}
    found = model_explorer.search(
        model,
        data=exploration,
        calibration=calibration,
        held_out=held_out,
        seed=seed,
        output=tmp_path / "python.pkl",
        settings=settings,
    )
    from_file = ExplorationResult.load(tmp_path / "cli.pkl")
    assert _records(found.result) == _records(from_file)
    assert ExplorationResult.load(tmp_path / "python.pkl").records == found.result.records
    # The front judged on the held-out data alike: the file's reevaluation data, the loader
    scored = [(r["id"], r["extra"].get("held_out")) for r in found.result.records]
    assert scored == [(r["id"], r["extra"].get("held_out")) for r in from_file.records]
    assert any(score is not None for _, score in scored)
    assert found.result.stats["held_out"]["baseline"] == from_file.stats["held_out"]["baseline"]


class SmallNet(nn.Module):
    """A network no registry knows, trained here."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(8 * 64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


@pytest.fixture(scope="module")
def trained() -> tuple[nn.Module, DataLoader, DataLoader]:
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16
    y = torch.tensor(digits.target)
    torch.manual_seed(0)
    net = SmallNet()
    optimiser = torch.optim.Adam(net.parameters(), 1e-2)
    for _ in range(40):
        optimiser.zero_grad()
        nn.functional.cross_entropy(net(x[:1200]), y[:1200]).backward()
        optimiser.step()
    train = DataLoader(TensorDataset(x[:1200], y[:1200]), batch_size=128)
    held = DataLoader(TensorDataset(x[1200:1500], y[1200:1500]), batch_size=100)
    return net.eval(), train, held


def _search(trained, tmp_path: Path, **arguments):  # noqa: ANN202
    net, train, held = trained
    settings = {"exploration": {"nsga": SMALL}, **arguments.pop("settings", {})}
    return model_explorer.search(
        net, data=held, calibration=train, output=tmp_path / "r.pkl", settings=settings, **arguments
    )


def test_a_search_from_python_leaves_the_processs_settings_alone(
    trained, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The allocator's trim (memory.keep_freed_memory) and torch's thread count belong to the
    process: the command line and the workers set them where they start, a search called from
    a notebook changes neither (its host process keeps its allocator)."""
    from model_explorer import memory

    monkeypatch.setattr(memory, "_applied", None)  # as in a process that never set it
    threads = torch.get_num_threads()
    assert _search(trained, tmp_path).front
    assert memory._applied is None
    assert torch.get_num_threads() == threads


def test_a_model_defined_here_is_searched_and_comes_back_usable(trained, tmp_path: Path) -> None:
    """A front member's model scores what the result recorded for it (torch's own count of
    correct predictions), its export scores the same in onnxruntime, the file `search` wrote
    is the result, and the caller's model is unchanged."""
    pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
    import onnxruntime

    net, _, held = trained
    before = copy.deepcopy(net.state_dict())
    found = _search(trained, tmp_path)
    assert found.front and ExplorationResult.load(found.path).records == found.result.records
    member = max(found.front, key=lambda i: i.values["accuracy"])
    model = found.model(member)
    inputs = torch.cat([x for x, _ in held])
    labels = torch.cat([y for _, y in held])
    with torch.no_grad():
        correct = (model(inputs).argmax(1) == labels).float().mean().item()
    assert correct == pytest.approx(member.values["accuracy"])
    session = onnxruntime.InferenceSession(str(found.export(member, tmp_path / "m.onnx")))
    name = session.get_inputs()[0].name
    predicted = torch.from_numpy(session.run(None, {name: inputs.numpy()})[0]).argmax(1)
    assert (predicted == labels).float().mean().item() == pytest.approx(correct, abs=0.01)
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())


def test_a_score_function_of_the_caller_is_what_the_search_records(trained, tmp_path: Path) -> None:
    """A loss (lower is better) of outputs and targets, and a function of the whole model:
    each individual's recorded value is the function applied to its model by hand."""
    _, _, held = trained

    def loss(outputs: torch.Tensor, targets: torch.Tensor) -> float:
        return nn.functional.cross_entropy(outputs, targets).item()

    found = _search(
        trained,
        tmp_path,
        score=loss,
        maximize=False,
        settings={"problem": {"maximum_divergence": 1.0}},
    )
    member = found.front[0]
    model = found.model(member)
    with torch.no_grad():
        total = sum(loss(model(x), y) * len(y) for x, y in held) / sum(len(y) for _, y in held)
    assert member.values["accuracy"] == pytest.approx(total, rel=1e-5)

    def agreement(model: nn.Module) -> float:
        with torch.no_grad():
            return float(sum((model(x).argmax(1) == y).sum() for x, y in held)) / 300

    found = _search(trained, tmp_path / "whole", score=agreement)
    member = found.front[-1]
    assert member.values["accuracy"] == pytest.approx(agreement(found.model(member)))


def test_quantize_puts_a_plan_or_one_width_into_effect(trained) -> None:
    net, train, held = trained
    eight = model_explorer.quantize(net, 8, calibration=train)
    two = model_explorer.quantize(
        net, {"head": {"input_bits": 2, "weight_bits": 2}}, calibration=train
    )
    assert {q.num_bits for q in eight.quantizers.values()} == {8}
    assert two.layers["head"].weight_quantizer.num_bits == 2
    float_accuracy = model_explorer.evaluate(net, held)
    assert model_explorer.evaluate(eight, held) == pytest.approx(float_accuracy, abs=0.02)
    assert model_explorer.evaluate(two, held) < model_explorer.evaluate(eight, held)


def _refused(call, *words: str) -> None:  # noqa: ANN001
    with pytest.raises(UserError) as raised:
        call()
    message = str(raised.value)
    assert "\n" not in message and all(word in message for word in words), message


def test_bad_input_is_one_sentence(trained, tmp_path: Path) -> None:
    net, train, held = trained
    compiled = torch.compile(net)
    _refused(lambda: _search((compiled, train, held), tmp_path / "a"), "torch.compile", "_orig_mod")
    hooked = copy.deepcopy(net)
    hooked.head.register_forward_hook(lambda *_: None)
    _refused(lambda: _search((hooked, train, held), tmp_path / "b"), "'head'", "hooks")
    _refused(lambda: _search((net, train, []), tmp_path / "c"), "exploration", "no batch")
    _refused(lambda: _search((net, [], held), tmp_path / "d"), "calibrat")

    def broken(model: nn.Module) -> float:
        raise ValueError("no labels here")

    _refused(lambda: _search(trained, tmp_path / "e", score=broken), "broken", "ValueError")
    _refused(lambda: _search(trained, tmp_path / "f", score=lambda model: "high"), "not a number")
    _refused(lambda: _search((nn.Sequential(nn.ReLU()), train, held), tmp_path / "g"), "quantiz")
    _refused(
        lambda: _search(trained, tmp_path / "i", budget={"weighted_bits": 3}),
        "problem.budget",
        "cannot be met",
    )
    _search(trained, tmp_path / "j")
    _refused(lambda: _search(trained, tmp_path / "j"), "exists", "resume=True")
    runner = {"exploration": {"runner": {"type": "processes"}}}
    _refused(lambda: _search(trained, tmp_path / "h", settings=runner), "serial")


def test_a_search_that_fails_midway_keeps_its_evaluations_and_resumes(
    trained, tmp_path: Path
) -> None:
    """A score function that fails once, on its twelfth call: one sentence, the evaluations
    before it in the result file, and `resume=True` ends with the individuals of a search
    that never failed."""
    _, _, held = trained
    calls = []

    def flaky(model: nn.Module) -> float:
        calls.append(1)
        if len(calls) == 12:
            raise RuntimeError("out of memory")
        with torch.no_grad():
            return float(sum((model(x).argmax(1) == y).sum() for x, y in held)) / 300

    settings = {"exploration": {"initialization": "random", "nsga": SMALL}}
    _refused(lambda: _search(trained, tmp_path, score=flaky, settings=settings), "flaky", "kept")
    saved = ExplorationResult.load(tmp_path / "r.pkl")
    assert len(saved.records) + len(saved.partial) >= 10
    resumed = _search(trained, tmp_path, score=flaky, settings=settings, resume=True)
    whole = _search(trained, tmp_path / "whole", score=flaky, settings=settings)
    assert _records(resumed.result) == _records(whole.result)


def test_a_budget_holds_every_feasible_individual_to_it(trained, tmp_path: Path) -> None:
    """weighted_bits at most 14 (of 8 to 32 here): feasibility is the accuracy limit and the
    budget, each individual's cost recomputed from its plan by the bit-cost model's rule."""
    found = _search(trained, tmp_path, budget={"weighted_bits": 14})
    assert found.front
    for individual in found.individuals:
        bits = sum(s["input_bits"] + s["weight_bits"] for s in found.plan(individual).values())
        assert individual.values["weighted_bits"] == bits
        if individual.feasible:
            assert individual.values["weighted_bits"] <= 14
    assert any(not i.feasible and i.values["weighted_bits"] > 14 for i in found.individuals)


WITHOUT_ONNX = """
import sys
sys.modules["onnx"] = None  # as in an install without it: `import onnx` fails
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
import model_explorer
from model_explorer.cli import main
from model_explorer.errors import UserError
from model_explorer.metrics.functions import evaluate

digits = load_digits()
x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16
y = torch.tensor(digits.target)
torch.manual_seed(0)
net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(256, 10))
optimiser = torch.optim.Adam(net.parameters(), 1e-2)
for _ in range(30):
    optimiser.zero_grad()
    nn.functional.cross_entropy(net(x[:1000]), y[:1000]).backward()
    optimiser.step()
data = DataLoader(TensorDataset(x[1000:1300], y[1000:1300]), batch_size=100)
found = model_explorer.search(
    net.eval(), data=data, output=sys.argv[1],
    settings={"exploration": {"nsga": {"pop_size": 4, "offsprings": 4, "generations": 1}}},
)
best = found.front[0]
score = evaluate(found.model(best), data, "top1")
assert abs(score - best.values["accuracy"]) < 1e-9, (score, best.values)
try:
    found.export(best, sys.argv[1] + ".onnx")
except UserError as error:
    print("library:", error)
status = main(["export", f"{sys.argv[1]}#{best.id}", "--onnx", sys.argv[1] + ".onnx"])
print("status:", status)
"""


def test_without_onnx_the_model_comes_back_and_an_export_says_what_to_install(
    tmp_path: Path,
) -> None:
    """In an install without onnx, `found.model` still hands back the searched model (it
    needs no exporter) and scores what the search recorded; `found.export` and the `export`
    command say in one sentence which package is missing and how to install it."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_ONNX, str(tmp_path / "r.pkl")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    install = (
        "needs onnx, which is not installed; install it with pip install 'model_explorer[onnx]'"
    )
    assert f"library: Search.export {install}" in done.stdout
    assert "status: 2" in done.stdout
    assert f"error: model-explorer export {install}" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_result_comes_back_with_the_objects_it_was_searched_on(trained, tmp_path: Path) -> None:
    """`model_explorer.load` gives a finished search back as `search` returned it: the same
    front, and a member's model scoring what was recorded; resuming a complete result says
    so and names `load`."""
    from model_explorer.metrics.functions import evaluate

    net, train, held = trained
    found = _search(trained, tmp_path)
    with pytest.raises(UserError, match=r"search\(resume=True\): .* is already complete; "):
        _search(trained, tmp_path, resume=True)
    back = model_explorer.load(found.path, net, data=held, calibration=train)
    assert [i.id for i in back.front] == [i.id for i in found.front]
    best = max(back.front, key=lambda i: i.values["accuracy"])
    assert evaluate(back.model(best), held, "top1") == best.values["accuracy"]
    with pytest.raises(UserError, match=r"load\(data=.*\): expected an iterable of batches"):
        model_explorer.load(found.path, net, data=3)


def test_a_search_of_objects_is_debugged_in_python_and_refused_by_the_commands(
    trained, tmp_path: Path, capsys
) -> None:
    """`debug_search(found, member)` gives what `model-explorer debug` gives for a workload: a
    row per quantized layer with its SQNR; the command, which cannot rebuild a model given in
    Python, says so in one sentence and names `model_explorer.load`."""
    from model_explorer.analysis.debug.api import debug_search

    found = _search(trained, tmp_path)
    member = found.front[0]
    report = debug_search(found, member, runtimes=())
    assert report.individual == member.id
    assert {row["layer"] for row in report.rows} == set(found.model(member).layers)
    assert main(["debug", f"{found.path}#{member.id}", "--no-runtime"]) == 2
    said = capsys.readouterr().err
    assert "stands for an object given to model_explorer.search in Python" in said
    assert "model_explorer.load(RESULTS, model, data)" in said
