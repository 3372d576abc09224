"""The WorkloadContext of objects a caller holds: their nn.Module instead of a `model:` spec,
their iterables of batches instead of `datasets:` specs. Everything above a context (the
calibration, the problem builders, explore, export) runs unchanged on it, so a search started
from Python builds what the command line builds."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from functools import cached_property
from typing import Any

import torch
from torch import nn

from model_explorer.api.arguments import ARGUMENTS, check_first_calls, seeded
from model_explorer.api.stepped import Stepped, as_pair
from model_explorer.datasets.cache import TensorCache
from model_explorer.errors import UserError
from model_explorer.metrics.functions import needs_reference
from model_explorer.modules import sample_count
from model_explorer.schema.roles import DATASET_ROLES
from model_explorer.workload.context import WorkloadContext
from model_explorer.workload.file import Workload, dataset_spec

# The roles a caller's data stands for: the exploration data also gives the baseline.
SAME_DATA = {"baseline": "exploration"}


def check_module(model: Any, where: str = "model") -> nn.Module:
    """A plain nn.Module whose layers can be swapped: a torch.compile'd module or one with
    forward hooks of the caller's is refused in one sentence."""
    if not isinstance(model, nn.Module):
        raise UserError(f"{where}: expected a torch.nn.Module, got {type(model).__name__}")
    if hasattr(model, "_orig_mod"):
        raise UserError(
            f"{where}: the model is wrapped by torch.compile, whose compiled graph would keep "
            "running the float layers; pass the module before compiling it (model._orig_mod)"
        )
    hooked = [
        name or "the model"
        for name, module in model.named_modules()
        if module._forward_hooks or module._forward_pre_hooks
    ]
    if hooked:
        raise UserError(
            f"{where}: module '{hooked[0]}' carries forward hooks of its own, which would not "
            "follow its layers when they are swapped for quantized ones; remove them (or pass "
            "a copy without them) and add them to the models the search returns"
        )
    return model


def _head(inputs: Any, device: torch.device, count: int) -> Any:
    """A batch's first `count` samples on `device` (a tensor, or a tuple of tensors): enough to
    see whether the model takes the batch."""
    if isinstance(inputs, torch.Tensor):
        return inputs[:count].to(device)
    return tuple(
        _head(item, device, count) if isinstance(item, torch.Tensor) else item for item in inputs
    )


class ObjectContext(WorkloadContext):
    """A WorkloadContext whose model is `model` (copied for every use: quantization swaps
    layers in place) and whose dataset roles are the caller's iterables of batches (`data`:
    role -> batches of `(inputs, targets)`, tensors or tuples of tensors; a calibration role's
    batches may be inputs alone)."""

    def __init__(
        self,
        workload: Workload,
        model: nn.Module,
        data: dict[str, Iterable[Any]],
        device: torch.device | str | None = None,
        forward_step: Callable[[nn.Module, Any], Any] | None = None,
    ) -> None:
        super().__init__(workload, device)
        self.model = check_module(model)
        self.forward_step = forward_step
        self.data = data
        self.keys: list[str] | None = None  # a dict batch's keys, in order
        self._materialised: dict[str, list[Any]] = {}
        self._unlabelled: set[str] = set()
        # each role's first batch, as the caller's iterable gave it
        self._first: dict[str, Any] = {}
        for role in data:
            self._batches_of(role)
        first = {role: self._batches_of(role)[0][0] for role in data}
        moved = {role: (_head(inputs, self.device, 2), inputs) for role, inputs in first.items()}
        check_first_calls(self._probe_model, moved, self.keys, forward_step, self._first)

    def _role(self, role: str) -> str:
        return role if role in self.data else SAME_DATA.get(role, role)

    def has_dataset(self, role: str) -> bool:
        return self._role(role) in self.data

    def dataset(self, role: str) -> tuple[Any, str]:
        if not self.has_dataset(role):
            section, key = DATASET_ROLES[role]
            raise UserError(
                f"{key}: this step needs data for it; pass {key}= an iterable of batches"
            )
        found = dataset_spec(self.workload, role)
        return found if found is not None else (None, self._role(role))

    def _batches_of(self, role: str) -> list[Any]:
        """The caller's batches of a role, read once (a generator can be read only once)."""
        role = self._role(role)
        same = next((r for r in self._materialised if self.data[r] is self.data[role]), None)
        if role not in self._materialised and same is not None:  # one iterable, two roles
            self._materialised[role] = self._materialised[same]
            self._first[role] = self._first[same]
            self._unlabelled |= {role} if same in self._unlabelled else set()
        if role not in self._materialised:
            pairs = []
            where = f"search({ARGUMENTS.get(role, role)}=...)"
            for batch in seeded(self.data[role], self.workload.seed, where):
                self._first.setdefault(role, batch)
                inputs, targets, self.keys = as_pair(batch, self.keys)
                if targets is None:  # inputs alone: a placeholder no label check accepts
                    self._unlabelled.add(role)
                    targets = torch.zeros(sample_count(inputs))
                pairs.append((inputs, targets))
            if not pairs:
                raise UserError(f"{role}: the iterable given yields no batch; pass one with data")
            self._materialised[role] = pairs
        return self._materialised[role]

    def _stepped(self, model: nn.Module) -> nn.Module:
        """The model called as the caller's batches need (stepped.py), where they need it."""
        if self.keys is None and self.forward_step is None:
            return model
        return Stepped(model, self.forward_step, self.keys)

    def check_data(self, cache: TensorCache, where: str) -> None:
        """As the workload's, except that batches without targets are refused where the
        score compares outputs with targets."""
        metric = self.workload.metric
        if where in self._unlabelled and not metric.type.startswith("python:"):
            if not needs_reference(metric):
                raise UserError(
                    f"{where}: the batches hold inputs alone, and score '{metric.type}' "
                    "compares outputs with targets; pass (inputs, targets) batches, a fidelity "
                    "metric (cosine, kl, agreement) or a function of the model"
                )
        super().check_data(cache, where)

    def build_model(self, load_weights: bool = True, fold: bool | None = None) -> nn.Module:
        """A fresh copy of the caller's model on the device, in eval mode (its weights as
        given: `load_weights` has no file to read), its batch norms folded where the
        workload's `model.fold_batchnorm` says."""
        from model_explorer.models.checkpoints import fold_batchnorm

        torch.manual_seed(self.workload.seed)
        model = copy.deepcopy(self.model).eval()
        if self.workload.model.fold_batchnorm if fold is None else fold:
            model = fold_batchnorm(model, where="model.fold_batchnorm")
        return self._stepped(model).to(self.device)

    @cached_property
    def _probe_model(self) -> nn.Module:
        return self._stepped(copy.deepcopy(self.model).eval()).to(self.device)

    def cache_key(self, role: str) -> str:
        """The role whose batches serve it (the baseline is scored on the exploration data)."""
        return self._role(role)

    def decoded(self, role: str) -> tuple[TensorCache, str]:
        self.dataset(role)  # refused when the caller gave no such data
        key = self._role(role)
        return TensorCache.from_batches(self._batches_of(key), self.device, where=key), key

    def loader(self, role: str, shuffle: bool = False) -> Any:
        """The caller's batches of a role, as given (calibration reads inputs alone too)."""
        self.dataset(role)
        return self._batches_of(role)

    def describe(self, role: str) -> dict[str, Any]:
        return {
            "role": role,
            "where": self._role(role),
            "type": "python",
            "samples": self.batches(role).num_samples,
        }
