"""Does a configuration hold where it is deployed? An individual of a result exported in QDQ
form and run by each runtime on the data the search scored it on, beside the fake-quantized
model and the accuracy the result recorded.

Each runtime runs the file as its user will, at its default settings; another setting
(`onnxruntime:basic`) runs only beside the default, when asked. Every runtime scores the same
samples as the fake-quantized model, so each comparison is paired, sample by sample
(results/statistics.py: McNemar's exact test for a metric counting hits, the paired t-test for a
mean of per-sample values): the check fails where a runtime's default is distinctly off the
fake-quantized model (p < ALPHA), or a setting off its runtime's default, and not where a few
near-tie samples flip one way (3 of 96, all one way: p = 0.25). It says the cause in one
sentence: the runtime's other settings are tried until one is not distinct from the
fake-quantized model, which names what the default adds. Where the metric keeps no per-sample
outcomes, or a value compared has none, a difference over `TOLERANCE` decides, as it did for
every check before. The fake-quantized model itself must score what the search recorded (the
same computation: any difference means other data, weights or calibration). What a file was
checked under goes into its `metadata_props` (export.write_metadata), with the audit of each
layer's asked and executed precision (deployment/audit.py).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from model_explorer.deployment.audit import FidelityAudit, audit_export
from model_explorer.deployment.export import ExportSummary, export_qdq, write_metadata
from model_explorer.deployment.runtimes import (
    Kernel,
    Runtime,
    as_input,
    describe_kernels,
    open_runtime,
    runtime_setting,
)
from model_explorer.errors import UserError
from model_explorer.operations.rebuild import calibrated_problem
from model_explorer.operations.verdicts import TOLERANCE, differs, paired, paired_text, scored
from model_explorer.results.confidence import Outcomes
from model_explorer.results.statistics import Paired

if TYPE_CHECKING:
    from model_explorer.results import ExplorationResult, Individual
    from model_explorer.workload.context import WorkloadContext

# The search scores individuals on this role; the check scores the runtimes on the same data.
ROLE = "exploration"


@dataclass
class RuntimeScore:
    """One runtime at one setting: its accuracy, its agreement with the fake-quantized model
    (the share of samples with the same predicted class), which layers it ran on integers (the
    `kernels` it reports), and what it was (`runtime` as named on the command line, `settings`
    in words)."""

    runtime: str
    accuracy: float
    agreement: float
    integer_layers: list[str] = field(default_factory=list)
    float_layers: list[str] = field(default_factory=list)
    settings: str = ""
    version: str = ""
    kernels: list[Kernel] = field(default_factory=list)
    # each sample's outcome (hits or values of the metric), for paired comparisons, and the
    # paired test the check decided on (against the fake-quantized model, or a setting's
    # against its runtime's default)
    outcomes: Outcomes | None = None
    test: Paired | None = None

    @property
    def default(self) -> bool:
        return ":" not in self.runtime


@dataclass
class DeploymentCheck:
    individual: int
    recorded: float | None
    fake_quant: float
    export: ExportSummary
    runtimes: list[RuntimeScore]
    failures: list[str] = field(default_factory=list)
    samples: int = 0
    # each layer's asked and executed precisions (deployment/audit.py)
    audit: FidelityAudit | None = None
    # the search stopped scoring the individual once it could not reach the minimum accuracy:
    # `recorded` is then the upper bound it had reached, not its score
    bound: bool = False

    @property
    def passed(self) -> bool:
        return not self.failures

    def row(self) -> dict[str, Any]:
        """One flat row: the individual, its accuracies and, per runtime, accuracy, agreement
        and the number of layers run on integers; whether the check passed."""
        row: dict[str, Any] = {
            "id": self.individual,
            "recorded_accuracy": self.recorded,
            "recorded_is_bound": self.bound,
            "fake_quant_accuracy": self.fake_quant,
            "file_bytes": self.export.size,
        }
        for score in self.runtimes:
            row[f"{score.runtime}_accuracy"] = score.accuracy
            row[f"{score.runtime}_agreement"] = score.agreement
            row[f"{score.runtime}_integer_layers"] = len(score.integer_layers)
            if score.test is not None:
                row[f"{score.runtime}_p_value"] = score.test.p_value
        if self.audit is not None:
            row["float_layers_asked_int8"] = len(self.audit.warnings)
        row["check"] = "passed" if self.passed else " ".join(self.failures)
        return row

    def metadata(self) -> dict[str, str]:
        """What the file was checked under, as ONNX metadata_props: one JSON entry per runtime
        and setting (version, settings, accuracy, agreement, samples) and the verdict."""
        props = {
            f"model_explorer.check.{score.runtime}": json.dumps(
                {
                    "version": score.version,
                    "settings": score.settings,
                    "accuracy": round(score.accuracy, 6),
                    "agreement": round(score.agreement, 6),
                    "recorded_accuracy": self.recorded,
                    "samples": self.samples,
                    **({"paired_p_value": score.test.p_value} if score.test else {}),
                }
            )
            for score in self.runtimes
        }
        props["model_explorer.check"] = "passed" if self.passed else " ".join(self.failures)
        if self.audit is not None:
            props["model_explorer.audit"] = json.dumps(self.audit.to_dict())
        return props


class Recorded(nn.Module):
    """Runs `forward` and keeps each batch's predicted classes (argmax of the last axis)."""

    def __init__(self, run: Any) -> None:
        super().__init__()
        self.run = run
        self.classes: list[Tensor] = []

    def forward(self, x: Tensor) -> Tensor:
        output = self.run(x)
        self.classes.append(output.detach().argmax(-1).cpu())
        return output


class RuntimeModule(nn.Module):
    """An activated runtime as a module: batches in (floats as float32, token ids as they
    are), its output as a tensor out."""

    def __init__(self, runtime: Runtime) -> None:
        super().__init__()
        self.runtime = runtime

    def forward(self, x: Tensor) -> Tensor:
        return torch.from_numpy(self.runtime.run(as_input(x))).to(x.device)


def export_individual(
    context: WorkloadContext,
    result: ExplorationResult,
    individual: Individual,
    path: str | Path,
    pack: bool = True,
    where: str = "RESULTS",
) -> tuple[nn.Module, ExportSummary]:
    """The individual's model (its plan in effect) and its QDQ export at `path`, which says in
    its metadata which individual of which search it is."""
    from model_explorer.quantization.coverage import Coverage

    problem = calibrated_problem(context, result, individual, where)
    model = problem.model
    inputs = next(iter(context.batches(ROLE)))[0]
    if isinstance(inputs, (tuple, list)):
        raise UserError(
            f"{where}: the model takes {len(inputs)} input tensors per batch, and export writes "
            "graphs of one input (as the runtimes here run them); the individual's model is "
            "usable in PyTorch (e.g. `search(...).model(individual)`)"
        )
    example = (inputs[:1] if isinstance(inputs, Tensor) else inputs).to(context.device)
    recorded = individual.values.get("accuracy")
    metadata = {
        "model_explorer.individual": str(individual.id),
        "model_explorer.problem": str(result.problem.get("name", "")),
        "model_explorer.recorded_accuracy": "" if recorded is None else f"{recorded:.6f}",
        "model_explorer.check": "not checked",
    }
    summary = export_qdq(model, example, path, pack, metadata)
    coverage = getattr(problem, "coverage", None)
    summary.coverage = None if coverage is None else Coverage.from_dict(coverage)
    return model, summary


def with_defaults(runtimes: list[str]) -> list[str]:
    """The runtimes to run: each as named, a setting other than the default after its
    runtime's default (a setting is judged beside what the user gets without choosing)."""
    planned: list[str] = []
    for name in runtimes:
        runtime, _, setting = name.partition(":")
        for item in ([runtime] if setting and setting != "default" else []) + [name]:
            item = item.removesuffix(":default")
            if item not in planned:
                planned.append(item)
    return planned


class Scorer:
    """Scores sessions of one file on the exploration data against the fake-quantized model's
    predicted classes."""

    def __init__(self, context: WorkloadContext, model: nn.Module, path: Path) -> None:
        self.context, self.path = context, path
        self.layers = getattr(model, "layers", {})
        reference = Recorded(model)
        self.fake_quant, self.outcomes = scored(context, reference)
        self.expected = torch.cat(reference.classes)

    def score(self, name: str) -> RuntimeScore:
        with open_runtime(name, self.path, "--check") as runtime:
            recorded = Recorded(RuntimeModule(runtime))
            accuracy, outcomes = scored(self.context, recorded)
            found = runtime.kernels()
        agreement = (torch.cat(recorded.classes) == self.expected).float().mean().item()
        kernels = describe_kernels(found, self.layers)
        return RuntimeScore(
            runtime.label,
            accuracy,
            agreement,
            kernels["integer"],
            kernels["float"],
            runtime.described(),
            runtime.version,
            found,
            outcomes,
        )


def check_individual(
    context: WorkloadContext,
    result: ExplorationResult,
    individual: Individual,
    runtimes: list[str],
    path: str | Path,
    pack: bool = True,
) -> DeploymentCheck:
    """Export the individual to `path`, run it with each runtime (at its default settings, and
    at any other setting named beside it) on the exploration data, score it beside the
    fake-quantized model and the recorded accuracy, and write what it was checked under into
    the file's metadata. The file is checked where it is staged beside `path` and moved there
    when every runtime has run it: a file a runtime cannot read or run is never written."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".model_explorer_check_") as folder:
        staged = Path(folder) / target.name
        model, summary = export_individual(context, result, individual, staged, pack)
        scorer = Scorer(context, model, staged)
        try:
            scores = [scorer.score(runtime) for runtime in with_defaults(runtimes)]
            recorded = individual.values.get("accuracy")
            check = DeploymentCheck(individual.id, recorded, scorer.fake_quant, summary, scores)
            check.bound = not individual.complete
            check.samples = len(scorer.expected)
            check.failures = judge(check, scorer)
            check.audit = audit_export(
                model, staged, [(s.runtime, s.version, s.kernels) for s in scores]
            )
        except UserError as error:
            said = str(error).replace(str(staged), str(target))
            raise UserError(f"{said}; {target} was not written") from None
        write_metadata(staged, check.metadata())
        os.replace(staged, target)
    summary.path = target
    summary.size = target.stat().st_size  # its metadata written in
    return check


def judge(check: DeploymentCheck, scorer: Scorer) -> list[str]:
    """One sentence per failure: the fake-quantized model off the recorded accuracy (by more
    than rounding), a runtime's default distinctly off the fake-quantized model, or a setting
    distinctly off its runtime's default, each runtime paired with what it is compared to on
    the same samples (`differs`)."""
    failures = []
    target = check.fake_quant if check.recorded is None else check.recorded
    if check.bound and check.fake_quant > target + TOLERANCE:
        failures.append(
            f"The fake-quantized model scores {check.fake_quant:.4f}, above the {target:.4f} "
            "the search recorded as the most it could reach when it stopped scoring it early: "
            "the workload's data, weights or calibration are not the search's."
        )
    elif not check.bound and abs(check.fake_quant - target) > TOLERANCE:
        failures.append(
            f"The fake-quantized model scores {check.fake_quant:.4f} against the recorded "
            f"{target:.4f}: the workload's data, weights or calibration are not the search's."
        )
    defaults = {score.runtime: score for score in check.runtimes if score.default}
    for score in check.runtimes:
        if score.default:
            test = score.test = paired(score.outcomes, scorer.outcomes)
            if differs(score.accuracy, check.fake_quant, test):
                failures.append(_off_default(score, check.fake_quant, scorer, test))
            continue
        default = defaults[score.runtime.partition(":")[0]]
        test = score.test = paired(score.outcomes, default.outcomes)
        if differs(score.accuracy, default.accuracy, test):
            failures.append(
                f"{score.runtime} ({score.settings}) scores {score.accuracy:.4f} where "
                f"{default.runtime} at its defaults scores {default.accuracy:.4f} "
                f"({paired_text(test, 'the default')})."
            )
    return failures


def _off_default(score: RuntimeScore, target: float, scorer: Scorer, test: Paired | None) -> str:
    """Why a runtime's default scores distinctly off the fake-quantized model: the first of
    its other settings that does not names what the default adds; else the runtime computes
    the file otherwise than the fake quantizers."""
    said = (
        f"{score.runtime} at its default settings ({score.settings}) scores "
        f"{score.accuracy:.4f} against the fake-quantized model's {target:.4f} "
        f"({paired_text(test)})"
    )
    runtime, _ = runtime_setting(score.runtime, "--check")
    for setting in [name for name in runtime.settings if name != "default"]:
        other = scorer.score(f"{score.runtime}:{setting}")
        if not differs(other.accuracy, target, paired(other.outcomes, scorer.outcomes)):
            return (
                f"{said}; at {other.runtime} ({runtime.settings[setting]}) it scores "
                f"{other.accuracy:.4f}, so what the default does beyond that setting causes "
                "the difference: run the file so, or check another individual."
            )
    return (
        f"{said}, and no setting of it does better: it computes some operator of the file "
        f"otherwise than the fake quantizers (same class on {score.agreement:.2%} of the "
        "samples)."
    )
