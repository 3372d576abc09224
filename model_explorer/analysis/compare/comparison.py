"""Cross-environment comparison: the same model and inputs in several environments (precisions,
compilers, runtimes, quantized configurations), their agreement pair by pair, and where a
disagreeing pair starts to diverge.

Collect (`compare` runs every environment, timed and repeated), aggregate (`pair_metrics`,
`localise`), render (`compare_render`). Metrics of a pair (A, B) over the logits a, b of the
same samples, symmetric in A and B:

- top-1 agreement: share of samples whose arg-max class is the same;
- top-5 agreement: share of samples whose sets of the 5 highest classes are the same
  (k = the number of classes when there are fewer);
- max absolute error: max |a - b| over every logit;
- max relative error: max |a - b| / max(max |a|, max |b|), relative to the output's range, so
  that logits near zero do not blow it up;
- cosine similarity of each sample's logit vectors, mean and minimum over the samples.

A pair agrees when its top-1 agreement is 1 and its max relative error is at most the tolerance.
"""

from __future__ import annotations

import copy
import logging
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from model_explorer.analysis.compare.environments import (
    Environment,
    EnvironmentSkipped,
    TorchEnvironment,
    environment,
)
from model_explorer.analysis.compare.localisation import localisation_samples, localise
from model_explorer.analysis.compare.runs import (
    Run,
    deltann_metrics,
    measure,
    pair_metrics,
)
from model_explorer.errors import UserError

log = logging.getLogger(__name__)

DEFAULT_TOLERANCE = 1e-4


@dataclass
class Comparison:
    """Every environment's run, the skipped ones with their reasons, every pair's metrics and
    the localisations of the pairs that disagree."""

    runs: dict[str, Run]
    skipped: dict[str, str]
    pairs: list[dict[str, Any]]
    samples: int
    batch_size: int
    repeats: int
    tolerance: float
    localisations: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    # the samples' labels, or for a label-free metric the float model's outputs
    targets: Any = None

    @property
    def failures(self) -> list[str]:
        """What failed: environments that raised while built or run, and localisations."""
        found = [f"{name}: {why}" for name, why in self.skipped.items() if why.startswith("failed")]
        found += [
            f"{a} vs {b}: {entry['note']}"
            for (a, b), entry in self.localisations.items()
            if entry.get("failed")
        ]
        return found


class Comparer:
    """Runs environments on the same inputs and compares them (see `compare`)."""

    def __init__(
        self,
        model: nn.Module,
        inputs: Tensor,
        targets: Tensor | None = None,
        batch_size: int = 64,
        repeats: int = 3,
        tolerance: float = DEFAULT_TOLERANCE,
        localise_samples: int = 8,
    ) -> None:
        self.model = copy.deepcopy(model).to("cpu", torch.float32).eval()
        self.inputs = inputs.detach().to("cpu", torch.float32)
        self.targets = targets
        self.batch_size = batch_size
        self.repeats = repeats
        self.tolerance = tolerance
        self.localise_samples = localise_samples
        self._eager: TorchEnvironment | None = None

    def eager(self) -> TorchEnvironment:
        """The eager float32 model: the stand-in for environments without intermediates."""
        if self._eager is None:
            self._eager = TorchEnvironment("eager")
            self._eager.prepare(copy.deepcopy(self.model), self.inputs[:1])
        return self._eager

    def _accuracy(self, logits: np.ndarray) -> float | None:
        targets = self.targets
        if targets is None or not isinstance(targets, Tensor) or targets.dim() != 1:
            return None
        if len(targets) != len(logits):
            return None
        return float(np.mean(logits.argmax(axis=1) == targets.cpu().numpy()))

    def run_all(self, envs: list[Environment]) -> tuple[dict[str, Run], dict[str, str]]:
        runs: dict[str, Run] = {}
        skipped: dict[str, str] = {}
        for env in envs:
            log.info("running environment %s", env.name)
            try:
                run = measure(env, self.model, self.inputs, self.batch_size, self.repeats)
            except EnvironmentSkipped as reason:
                skipped[env.name] = str(reason)
                env.close()
                continue
            except UserError:
                env.close()
                raise
            except Exception as error:  # a backend that fails on this model is a finding
                skipped[env.name] = f"failed: {_said(error)}"
                log.warning("environment %s failed", env.name, exc_info=True)
                env.close()
                continue
            run.accuracy = self._accuracy(run.logits)
            runs[env.name] = run
        return runs, skipped

    def pairs(
        self, ran: list[Environment], runs: dict[str, Run], localised: list[str]
    ) -> tuple[list[dict[str, Any]], dict[tuple[str, str], dict[str, Any]]]:
        """Every pair's metrics, and the localisation of each pair that disagrees and has an
        environment named in `localised`."""
        pairs, localisations = [], {}
        for i, a in enumerate(ran):
            for b in ran[i + 1 :]:
                pair = {"a": a.name, "b": b.name}
                pair.update(pair_metrics(runs[a.name].logits, runs[b.name].logits))
                pair.update(deltann_metrics(runs[a.name], runs[b.name]))
                pair["agree"] = not disagrees(pair, self.tolerance)
                if not pair["agree"] and {a.name, b.name} & set(localised):
                    localisations[(a.name, b.name)] = self.localise_or_say(a, b, runs)
                pairs.append(pair)
        return pairs, localisations

    def _intermediates(
        self, env: Environment, inputs: Tensor
    ) -> tuple[dict[str, Tensor] | None, str]:
        found = env.intermediates(inputs)
        if found is not None:
            return found, env.name
        stand_in = env.stand_in()
        if stand_in is not None:
            return stand_in.intermediates(inputs), stand_in.name
        return self.eager().intermediates(inputs), "the eager float32 model"

    def localise_or_say(
        self, a: Environment, b: Environment, runs: dict[str, Run]
    ) -> dict[str, Any]:
        """`localise_pair`, or where it fails (a runtime that cannot read the tapped file),
        the pair's entry with the failure as its note and `failed` set, so that the other
        pairs and every file are still written."""
        try:
            return self.localise_pair(a, b, runs)
        except UserError:
            raise
        except Exception as error:  # one backend's failure is a finding, as a failed run is
            log.warning("localising %s vs %s failed", a.name, b.name, exc_info=True)
            return {
                "a": a.name,
                "b": b.name,
                "intermediates_of": None,
                "samples": [],
                "first": None,
                "operators": [],
                "failed": _said(error),
                "note": f"localisation failed: {_said(error)}",
            }

    def localise_pair(self, a: Environment, b: Environment, runs: dict[str, Run]) -> dict[str, Any]:
        """Where the pair (a, b) diverges, on its most disagreeing samples."""
        samples = localisation_samples(
            runs[a.name].logits, runs[b.name].logits, self.localise_samples
        )
        inputs = self.inputs[samples]
        first, source_a = self._intermediates(a, inputs)
        second, source_b = self._intermediates(b, inputs)
        notes = [
            f"{env.name} exposes no intermediates; {source} stands in for it"
            for env, source in ((a, source_a), (b, source_b))
            if source != env.name
        ]
        found = {
            "a": a.name,
            "b": b.name,
            "intermediates_of": [source_a, source_b],
            "samples": samples,
        }
        stand_ins = [
            env.name for env, source in ((a, source_a), (b, source_b)) if source != env.name
        ]
        if source_a == source_b:
            notes.append("both sides are the same model here: the difference is the backend's")
            return {**found, "first": None, "operators": [], "note": "; ".join(notes)}
        found.update(localise(first, second, self.tolerance))
        if found["first"] is None and stand_ins:
            notes.append(
                f"no operator differs above {self.tolerance:g}: the difference arises inside "
                f"{' and '.join(stand_ins)}, whose operators are not visible"
            )
        elif found["first"] is None:
            notes.append(f"no operator's relative error exceeds {self.tolerance:g}")
        found["note"] = "; ".join(notes)
        return found


def _said(error: Exception) -> str:
    """A backend's failure as recorded: its type and the first line of its message."""
    first = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {first}"


def disagrees(pair: dict[str, Any], tolerance: float) -> bool:
    return pair["top1_agreement"] < 1.0 or not pair["max_rel_error"] <= tolerance


def _environments(
    environments: list[str | Environment],
    context: Any,
    samples: int,
    repeats: int,
    tolerance: float,
) -> list[Environment]:
    """The Environments named, once the comparison's settings are checked."""
    if repeats < 1:
        raise UserError("--repeats: repeat every environment at least once")
    if samples == 0:
        raise UserError("compare: there are no samples to run")
    if not tolerance >= 0:
        raise UserError(f"--tolerance: a relative error is at least 0, got {tolerance}")
    envs = [e if isinstance(e, Environment) else environment(e, context) for e in environments]
    names = [e.name for e in envs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise UserError(f"--env: {', '.join(duplicates)} given twice; name each environment once")
    _shorten_result_names(envs)
    return envs


# `quantized:results/expl_..._20261123-194041.pkl#64`: a result file's individual.
_RESULT_REFERENCE = re.compile(r"^(?P<kind>[\w-]+):(?P<path>.+)#(?P<id>\d+)$")


def _shorten_result_names(envs: list[Environment]) -> None:
    """Environments that name a result file's individual go by `kind#ID` (`quantized#64`) in
    tables, figures and the JSON, the full reference moved into their description; two that
    would share a short name keep their full ones."""
    short = {}
    for env in envs:
        found = _RESULT_REFERENCE.match(env.name)
        if found:
            short[id(env)] = f"{found['kind']}#{found['id']}"
    taken = [e.name for e in envs if id(e) not in short] + list(short.values())
    for env in envs:
        name = short.get(id(env))
        if name is not None and taken.count(name) == 1:
            env.description = f"{env.name}: {env.description}"
            env.name = name


def compare(
    model: nn.Module,
    inputs: Tensor,
    environments: list[str | Environment],
    targets: Tensor | None = None,
    context: Any = None,
    batch_size: int = 64,
    repeats: int = 3,
    tolerance: float = DEFAULT_TOLERANCE,
    localise_disagreements: bool = True,
    localise_samples: int = 8,
    localise_against: str | None = None,
) -> Comparison:
    """Run `model` on `inputs` in every environment, compare every pair, localise the pairs
    that disagree.

    Args:
        model: the float model (copied, in float32 on the CPU, for each environment).
        inputs: the samples, one batch along dim 0.
        environments: names as `environment()` takes them (`eager`, `onnxruntime`,
            `threads=2`, `quantized:RESULTS#ID`, ...) or Environment objects.
        targets: labels of the samples, for each environment's accuracy, or None.
        context: the WorkloadContext quantized environments rebuild individuals from.
        batch_size: samples per forward pass.
        repeats: timed runs per environment (the median is kept; results compared bitwise).
        tolerance: the relative error above which two environments' outputs differ.
        localise_disagreements: find the first diverging operator of every pair that differs.
        localise_samples: how many of the most disagreeing samples localisation runs on.
        localise_against: localise only the pairs with this environment (DeltaNN's study:
            every environment against one reference); None: every pair.
    """
    envs = _environments(environments, context, len(inputs), repeats, tolerance)
    names = [env.name for env in envs]
    if localise_against is not None and localise_against not in names:
        raise UserError(
            f"--localise-against: '{localise_against}' is not one of the environments "
            f"compared ({', '.join(names)}); name one of them"
        )
    comparer = Comparer(model, inputs, targets, batch_size, repeats, tolerance, localise_samples)
    try:
        runs, skipped = comparer.run_all(envs)
        ran = [e for e in envs if e.name in runs]
        localised = names if localise_against is None else [localise_against]
        pairs, localisations = comparer.pairs(
            ran, runs, localised if localise_disagreements else []
        )
    finally:
        for env in envs:
            env.close()
    return Comparison(
        runs,
        skipped,
        pairs,
        len(inputs),
        batch_size,
        repeats,
        tolerance,
        localisations,
        None if targets is None else targets.detach().cpu().numpy(),
    )


def workload_samples(
    context: Any, role: str, samples: int | None
) -> tuple[Tensor, Tensor | None, int]:
    """The first `samples` inputs and targets of a workload's dataset role (all when None), and
    the role's batch size."""
    cache = context.batches(role)
    if not isinstance(cache.inputs, Tensor):
        raise UserError(f"--dataset {role}: compare runs models with one input tensor")
    count = cache.num_samples if samples is None else min(samples, cache.num_samples)
    targets = cache.targets[:count] if isinstance(cache.targets, Tensor) else None
    return cache.inputs[:count], targets, cache.batch_size
