"""Forward hooks over a module tree: every module seen in order (Inline ones never), hooks gone
and the train/eval mode back afterwards whatever happened, and a failure naming the module that
was running; a module rebuilt as another class shares its state."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from model_explorer.modules import Inline, module_hooks, rebuild


class Fails(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("planted failure")


def nested() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), nn.Linear(4, 2)))


def hook_count(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_modules_are_seen_in_order_with_their_parents_running() -> None:
    model = nested().train()
    seen = []

    def before(name, module, args):
        seen.append(("enter", name, [n for n, _ in trace.stack]))

    def after(name, module, args, output):
        seen.append(("leave", name, [n for n, _ in trace.stack]))

    with module_hooks(model, before, after) as trace:
        assert not model.training  # evaluated in eval mode
        model(torch.zeros(1, 4))
    assert seen[:3] == [("enter", "", [""]), ("enter", "0", ["", "0"]), ("leave", "0", [""])]
    assert ("enter", "1.1", ["", "1", "1.1"]) in seen
    assert seen[-1] == ("leave", "", [])
    assert model.training and hook_count(model) == 0


def test_a_failure_names_the_innermost_running_module_and_cleans_up() -> None:
    model = nested()
    model[1].append(Fails())
    model.train()
    with pytest.raises(RuntimeError, match="planted failure") as error:
        with module_hooks(model):
            model(torch.zeros(1, 4))
    assert any("module '1.2' (Fails) was running" in note for note in error.value.__notes__)
    assert model.training and hook_count(model) == 0


def test_only_the_chosen_modules_are_hooked_and_the_mode_can_stay() -> None:
    model = nested().eval()
    called = []
    chosen = [("head", model[1][1])]
    with module_hooks(
        model, after=lambda n, m, a, o: called.append(n), modules=chosen, eval_mode=False
    ):
        model(torch.zeros(3, 4))
        model(torch.zeros(3, 4))
    assert called == ["head", "head"]
    assert hook_count(model) == 0


class Step(Inline, nn.ReLU):
    """A step of its caller's work, not a module of the network."""


def test_inline_modules_are_never_hooked() -> None:
    model = nn.Sequential(nn.Linear(4, 4), Step(), nn.Sequential(Step(), nn.Linear(4, 2)))
    seen = []
    with module_hooks(model, before=lambda n, m, a: seen.append(n)):
        model(torch.zeros(1, 4))
    assert seen == ["", "0", "2", "2.1"]
    chosen = [("step", model[1]), ("linear", model[0])]
    with module_hooks(model, before=lambda n, m, a: seen.append(n), modules=chosen):
        model(torch.zeros(1, 4))
    assert seen[4:] == ["linear"]
    assert hook_count(model) == 0


def test_a_rebuilt_module_shares_parameters_but_not_their_containers() -> None:
    class Other(nn.Linear):
        pass

    layer = nn.Linear(4, 2)
    other = rebuild(layer, Other)
    assert type(other) is Other and other.weight is layer.weight
    other.extra = nn.ReLU()
    other.bias = None
    assert "extra" not in layer._modules and layer.bias is not None
