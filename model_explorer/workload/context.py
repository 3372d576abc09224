"""WorkloadContext: what every command builds from a workload, built once: device, model, data."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import cached_property
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from model_explorer.datasets.base import build_loader
from model_explorer.datasets.cache import TensorCache
from model_explorer.datasets.checks import check_against_model
from model_explorer.datasets.spec import DatasetSpec
from model_explorer.devices import workload_device
from model_explorer.errors import UserError
from model_explorer.metrics.functions import evaluate, needs_reference, reference_outputs
from model_explorer.models.checkpoints import build_model
from model_explorer.models.spec import model_info
from model_explorer.schema.roles import DATASET_ROLES
from model_explorer.workload.file import Workload, dataset_spec

log = logging.getLogger(__name__)


class WorkloadContext:
    """Builds the workload's model and data on its device; evaluation subsets are decoded once
    and kept as a TensorCache per dataset role.

    Args:
        workload: the validated Workload.
        device: where models and cached data live; the workload's `device` (and
            `problem.gpu_id`) when None.
    """

    def __init__(self, workload: Workload, device: torch.device | str | None = None) -> None:
        self.workload = workload
        self.device = torch.device(device) if device is not None else workload_device(workload)
        self._caches: dict[str, TensorCache] = {}
        self._outputs: dict[str, torch.Tensor] = {}
        self._checked: set[str] = set()

    def dataset(self, role: str) -> tuple[DatasetSpec, str]:
        """The spec of a dataset role ('exploration', 'train', ...) and its key path."""
        found = dataset_spec(self.workload, role)
        if found is None:
            section, key = DATASET_ROLES[role]
            raise UserError(
                f"workload.{section}.datasets.{key}: this command needs that dataset; add it to "
                f"{self.workload.source or 'the workload'}"
            )
        return found

    def has_dataset(self, role: str) -> bool:
        """Whether the workload names data for `role` (`calibrate`, `exploration`, ...)."""
        return dataset_spec(self.workload, role) is not None

    def build_model(self, load_weights: bool = True, fold: bool | None = None) -> nn.Module:
        """A fresh copy of the workload's model on the device, in eval mode, its batch norms
        folded where the workload says (`fold=False`: as trained). Random initialisation (for
        training from scratch) is seeded by the workload's seed."""
        torch.manual_seed(self.workload.seed)
        model = build_model(self.workload.model, load_weights=load_weights, fold=fold)
        return model.to(self.device)

    def batches(self, role: str) -> TensorCache:
        """The role's evaluation subset as tensors on the device, decoded on first use. With a
        fidelity metric (agreement, cosine, kl) the targets are the float model's outputs,
        computed here once instead of for every candidate."""
        key = self.cache_key(role)
        if key not in self._caches:
            cache, where = self.decoded(role)
            self.check_data(cache, where)
            if needs_reference(self.workload.metric):
                outputs = reference_outputs(self.build_model(), cache)
                targets = outputs[0] if len(outputs) == 1 else outputs
                cache = TensorCache(cache.inputs, targets, cache.batch_size)
            self._caches[key] = cache
        return self._caches[key]

    def float_outputs(self, role: str) -> torch.Tensor:
        """The float model's first output on every sample of the role's subset, in order,
        computed once: what a divergence from the float model is measured against."""
        key = f"float outputs of {self.cache_key(role)}"
        if key not in self._outputs:
            cache = self.batches(role)
            if needs_reference(self.workload.metric):
                targets = cache.targets
                self._outputs[key] = targets[0] if isinstance(targets, (list, tuple)) else targets
            else:
                self._outputs[key] = reference_outputs(self.build_model(), cache)[0]
        return self._outputs[key]

    def cache_key(self, role: str) -> str:
        """Which cache serves a role: its own."""
        return role

    def decoded(self, role: str) -> tuple[TensorCache, str]:
        """The role's subset decoded as tensors, and its key path."""
        spec, where = self.dataset(role)
        log.debug("caching %s (%s)", where, spec.type)
        return TensorCache.from_spec(spec, self.workload.seed, self.device, where), where

    def loader(self, role: str, shuffle: bool = False) -> DataLoader:
        """A DataLoader over the role's subset (for training, which needs fresh augmentation);
        its first batch is checked against the model once, from a loader of its own so that
        the shuffling stays as seeded."""
        spec, where = self.dataset(role)
        if where not in self._checked:
            first = next(iter(build_loader(spec, self.workload.seed, where)), None)
            batches = [first] if first is not None else []
            self.check_data(TensorCache.from_batches(batches, where=where), where)
        return build_loader(spec, self.workload.seed, where, shuffle=shuffle)

    def check_data(self, cache: TensorCache, where: str) -> None:
        """The data of `where` against the model (shapes, NaN, labels), once per dataset: the
        model with random weights suffices, so no checkpoint is read and no RNG is consumed."""
        if where in self._checked:
            return
        metric = self.workload.metric
        check_against_model(
            self._probe_model,
            cache,
            where,
            expected_input(self.workload),
            labels=not needs_reference(metric),
            ignore_index=getattr(metric.options, "ignore_index", None),
        )
        self._checked.add(where)

    def check_input_shape(self, shape: Sequence[int], key: str) -> None:
        """A shape the user gave (`key`) must be one the model takes: the model with random
        weights runs on it once, else a UserError says what its layers expect."""
        from model_explorer.input_shapes import run_on_shape

        run_on_shape(self._probe_model, shape, key, self.device)

    @cached_property
    def _probe_model(self) -> nn.Module:
        """The workload's model with random weights, built once for every data check."""
        with torch.random.fork_rng(devices=[]):
            model = build_model(self.workload.model, load_weights=False, fold=False)
            return model.to(self.device)

    def evaluate(self, model: nn.Module, role: str) -> float | list[float]:
        """The workload's accuracy metric of `model` on a dataset role."""
        return evaluate(model, self.batches(role), self.workload.metric, self.device)

    def describe(self, role: str) -> dict[str, Any]:
        """What a role's data is, for reports: its role, where the workload names it, its type and
        sample count."""
        spec, where = self.dataset(role)
        return {
            "role": role,
            "where": where,
            "type": spec.type,
            "samples": self.batches(role).num_samples,
        }


def expected_input(workload: Workload) -> str | None:
    """What a registered model says about its input samples, for messages."""
    name = workload.model.type
    info = model_info(name)
    shape = getattr(info, "input_shape", None)
    return f"model '{name}' takes samples of shape {list(shape)}" if shape else None
