"""Every argument of `model_explorer.search` is checked where it enters: a wrong one is one
sentence naming the argument as the caller wrote it (not the workload key it becomes), before
any work; a model that cannot take the batches it is given is one sentence naming the
argument, the call that failed and `forward_step`; and the API's documented spellings run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import model_explorer
from model_explorer.errors import UserError

TINY = {"exploration": {"nsga": {"pop_size": 4, "offsprings": 4, "generations": 1}}}


def small_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 12), nn.ReLU(), nn.Linear(12, 3)).eval()


def batches(count: int = 2, size: int = 20) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        (
            torch.randn(size, 1, 4, 4, generator=generator),
            torch.randint(0, 3, (size,), generator=generator),
        )
        for _ in range(count)
    ]


@pytest.mark.parametrize(
    "arguments, says",
    [
        ({"bits": (8, 2)}, "search(bits=(8, 2)): expected the lowest width first"),
        ({"bits": (2, 8, 4)}, "search(bits=(2, 8, 4)): expected (lowest, highest) widths"),
        ({"bits": (1, 8)}, "from 2 to 16"),
        (
            {"bits": (2, 8), "formats": ["int8"]},
            "search(bits=(2, 8)): the genes choose among `formats`",
        ),
        ({"formats": "int8"}, "search(formats='int8'): expected a list of names"),
        ({"objectives": "accuracy"}, "search(objectives='accuracy'): expected a list of names"),
        (
            {"budget": 400},
            "search(budget=400): expected limits by cost, e.g. budget={'weighted_bits': 120}",
        ),
        ({"budget": {"weighted_bits": "120"}}, "search(budget={'weighted_bits': '120'})"),
        ({"seed": -1}, "search(seed=-1): expected a whole number from 0"),
        ({"seed": 1.5}, "search(seed=1.5)"),
        ({"output": 3}, "search(output=3): expected a path"),
        (
            {"settings": [("exploration", {})]},
            "search(settings=[('exploration', {})]): expected workload settings",
        ),
        ({"maximize": "yes"}, "search(maximize='yes'): expected True, False or None"),
        ({"progress": "no"}, "search(progress='no'): expected True, False or None"),
        ({"forward_step": 5}, "search(forward_step=5): expected a function"),
        ({"data": torch.zeros(4, 1, 4, 4)}, "search(data=<tensor of shape [4, 1, 4, 4]>)"),
        (
            {"calibration": "train.pt"},
            "search(calibration='train.pt'): expected an iterable of batches",
        ),
    ],
)
def test_a_wrong_argument_is_named_as_the_caller_wrote_it(
    arguments: dict, says: str, tmp_path: Path
) -> None:
    given = {"data": batches(), "output": tmp_path / "r.pkl", **arguments}
    with pytest.raises(UserError) as caught:
        model_explorer.search(small_net(), **given)
    assert says in str(caught.value)
    assert "\n" not in str(caught.value) and "workload." not in str(caught.value)
    assert not (tmp_path / "r.pkl").exists()  # refused before any work


class Indexed(Dataset):
    """Samples with their index, as many research loaders yield them."""

    def __init__(self, data: list) -> None:
        self.x = torch.cat([x for x, _ in data])
        self.y = torch.cat([y for _, y in data])

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple:
        return self.x[i], self.y[i], i


class TakesDict(nn.Module):
    """A model whose forward takes the batch's dict itself."""

    def __init__(self) -> None:
        super().__init__()
        self.net = small_net()

    def forward(self, batch: dict) -> torch.Tensor:
        return self.net(batch["pixels"])


def test_a_loader_of_triples_is_one_sentence_naming_forward_step(tmp_path: Path) -> None:
    loader = DataLoader(Indexed(batches()), batch_size=20)
    with pytest.raises(UserError) as caught:
        model_explorer.search(small_net(), data=loader, output=tmp_path / "r.pkl")
    said = str(caught.value)
    assert said.startswith(
        "search(data=...): model(*batch) with 3 tensors failed on the first batch"
    )
    assert "tuples of 3" in said and "((x, y) for x, y, *_ in loader)" in said
    pairs = ((x, y) for x, y, *_ in loader)  # as the sentence says
    found = model_explorer.search(small_net(), data=pairs, output=tmp_path / "r.pkl", settings=TINY)
    assert found.front


def test_a_model_taking_the_dict_is_told_to_pass_forward_step(tmp_path: Path) -> None:
    data = [({"pixels": x}, y) for x, y in batches()]
    with pytest.raises(UserError) as caught:
        model_explorer.search(TakesDict(), data=data, output=tmp_path / "r.pkl")
    said = str(caught.value)
    assert "search(data=...): model(**batch) with keys ['pixels'] failed" in said
    assert "TypeError" in said and "forward_step=" in said


def test_the_documented_spellings_run(tmp_path: Path) -> None:
    """docs/python-api.md's call with `formats=` instead of `bits=` (the default bits were
    passed beside it and refused), and with a budget."""
    found = model_explorer.search(
        small_net(),
        data=batches(),
        formats=["int8", "fp8_e4m3"],
        output=tmp_path / "f.pkl",
        settings=TINY,
    )
    assert {str(c) for i in found.individuals for c in i.configuration} <= {"int8", "fp8_e4m3"}
    found = model_explorer.search(
        small_net(),
        data=batches(),
        bits=(4, 8),
        budget={"weighted_bits": 400},
        output=tmp_path / "b.pkl",
        settings=TINY,
    )
    assert found.individuals


class Logged(Dataset):
    """Samples that write down the order they are asked for in."""

    def __init__(self, data: list) -> None:
        self.x = torch.cat([x for x, _ in data])
        self.y = torch.cat([y for _, y in data])
        self.asked: list[int] = []

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple:
        self.asked.append(i)
        return self.x[i], self.y[i]


def test_a_shuffling_loader_is_read_alike_by_the_same_call(tmp_path: Path) -> None:
    """A DataLoader with shuffle=True draws its order from torch's global generator: the same
    search, and the same quantize, on the same objects read the samples in the same order
    whatever the caller did with the generator in between (the order the samples were asked
    for, as the dataset wrote it down), so they give the same result; a loader with a
    generator of its own is said in one warning."""
    data = Logged(batches(6))
    loader = DataLoader(data, batch_size=16, shuffle=True)
    orders, records = [], []
    for run, noise in enumerate((1, 2)):
        net = small_net()
        torch.manual_seed(noise)  # the caller's own use of the generator between the calls
        data.asked.clear()
        found = model_explorer.search(
            net, data=loader, output=tmp_path / f"r{run}.pkl", settings=TINY
        )
        orders.append(list(data.asked))
        records.append([(i.configuration, i.values) for i in found.individuals])
    assert orders[0] == orders[1] and orders[0] != sorted(orders[0])
    assert records[0] == records[1]
    orders = []
    for noise in (3, 4):
        net = small_net()
        torch.manual_seed(noise)
        data.asked.clear()
        model_explorer.quantize(net, 4, calibration=loader)
        orders.append(list(data.asked))
    assert orders[0] == orders[1]
    own = DataLoader(data, batch_size=16, shuffle=True, generator=torch.Generator())
    with pytest.warns(
        UserWarning, match=r"calibrate\(calibration=\.\.\.\): the DataLoader shuffles"
    ):
        model_explorer.calibrate(small_net(), own)


def test_a_search_keeps_the_shipped_accuracy_floor_unless_told(tmp_path: Path) -> None:
    """As every shipped workload, a feasible member keeps 98% of the float model's score (a
    member at 78.6% was on the front of a Python search); a constraint in `settings` wins."""
    from model_explorer.metrics.functions import evaluate

    data = batches(4)
    net = small_net()
    found = model_explorer.search(net, data=data, output=tmp_path / "a.pkl", settings=TINY)
    floor = 0.98 * evaluate(net, data, "top1")
    [limit] = [c for c in found.result.problem["constraints"] if c["name"] == "accuracy"]
    assert limit["minimum"] == pytest.approx(floor)
    assert all(member.values["accuracy"] >= floor for member in found.front)
    told = {**TINY, "problem": {"minimum_accuracy": 0.1}}
    found = model_explorer.search(net, data=data, output=tmp_path / "b.pkl", settings=told)
    [limit] = [c for c in found.result.problem["constraints"] if c["name"] == "accuracy"]
    assert limit["minimum"] == pytest.approx(0.1)


def test_two_searches_in_one_second_get_two_default_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Research code in a loop: the default result name carries the second it was made in;
    the second call takes the next free name instead of being refused."""
    import time

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(time, "strftime", lambda *_: "20261206-120000")
    first = model_explorer.search(small_net(), data=batches(), settings=TINY)
    second = model_explorer.search(small_net(), data=batches(), settings=TINY)
    assert first.path != second.path and second.path.name.endswith("-2.pkl")
    assert second.path.with_name(f"{second.path.stem}_calibration.pt").exists()


def test_the_command_lines_advice_is_said_as_a_caller_of_search_follows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A calibration file that does not fit the model (here planted: the sentence the loader
    says when the file lists other layers) tells a caller of `search` what to do, delete the
    file beside the result, not to run a command on a workload file."""
    from model_explorer.operations import pipeline

    def stale(context, **options):  # noqa: ANN001, ANN003, ANN202
        raise UserError(
            "workload.calibration.file: 'x' was made for another model: layers ['rnn'] are not "
            "in this model; recalibrate with `model-explorer calibrate WORKLOAD --force`"
        )

    monkeypatch.setattr(pipeline, "calibrate_workload", stale)
    with pytest.raises(UserError) as caught:
        model_explorer.search(small_net(), data=batches(), output=tmp_path / "b.pkl")
    said = str(caught.value)
    assert said.endswith(
        f"recalibrate with search() after deleting '{tmp_path / 'b_calibration.pt'}'"
    )
    assert "model-explorer calibrate" not in said


def test_progress_shows_where_someone_watches(monkeypatch: pytest.MonkeyPatch) -> None:
    """A search of a real network is minutes without a word: its bars show by default in a
    terminal or a notebook, not in a log file or a test, and `progress=` decides where given."""
    import sys

    from model_explorer.api import search as library

    asked = []
    monkeypatch.setattr(library, "_run", lambda *arguments: asked.append(arguments[-1]))
    monkeypatch.setattr(library, "_placed", lambda body, output, resume: (None, Path("x.pkl")))
    monkeypatch.setattr(library, "ObjectContext", lambda *arguments, **options: None)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    model_explorer.search(small_net(), data=batches())
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    model_explorer.search(small_net(), data=batches())
    model_explorer.search(small_net(), data=batches(), progress=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    monkeypatch.setitem(sys.modules, "ipykernel", object())
    model_explorer.search(small_net(), data=batches())
    assert asked == [False, True, False, True]


class FixedBatch(nn.Module):
    """A model written for one batch size (its reshape says 20), as research code may be."""

    def __init__(self) -> None:
        super().__init__()
        self.net = small_net()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.view(20, 1, 4, 4))


def test_a_model_made_for_its_batch_size_passes_the_first_call() -> None:
    """The first call tries two samples, then the whole first batch: a model that takes only
    its own batch size is not refused for it there (the other model refused as before)."""
    from model_explorer.api.arguments import check_first_calls

    whole = batches()[0][0]
    first = {"exploration": (whole[:2], whole)}
    check_first_calls(FixedBatch().eval(), first, None, None, {"exploration": batches()[0]})
    with pytest.raises(UserError, match=r"search\(data=\.\.\.\): model\(inputs\) failed"):
        check_first_calls(nn.Linear(5, 3), first, None, None, {"exploration": batches()[0]})
