"""Inspectors, findings and the shared state they read: the diagnose framework.

An inspector looks at one aspect of a workload's model and data and returns findings: a
severity (`info`, `warning`, `error`), the layer it concerns, a one-line message, the numbers
it measured (evidence) and, where a setting would help, a recommendation as a workload override
(a nested mapping merged into the workload's `workload:` section).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from model_explorer.errors import UserError
from model_explorer.problems.options import explored_bits
from model_explorer.schema.registry import Registry, import_object
from model_explorer.workload.context import WorkloadContext

log = logging.getLogger(__name__)

SEVERITIES = ("info", "warning", "error")
# Hailo's inspector priorities: the default order runs the highest first (ties by name).
UNSET, LOW, MEDIUM, HIGH = 0, 10, 20, 30


@dataclass
class Finding:
    severity: str
    inspector: str
    message: str
    layer: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    recommendation: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")

    def line(self) -> str:
        where = f" {self.layer}:" if self.layer else ""
        return f"[{self.severity}] {self.inspector}{where} {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "inspector": self.inspector,
            "layer": self.layer,
            "message": self.message,
            "evidence": self.evidence,
            "recommendation": self.recommendation,
        }


class BaseInspector:
    """Subclass, set `name`, implement `run(context)`; register with `@register_inspector`
    or name the class as `package.module:Class` in `--order`."""

    name = "base"
    priority = UNSET

    def run(self, context: DiagnosisContext) -> list[Finding]:
        raise NotImplementedError

    def finding(self, severity: str, message: str, **fields: Any) -> Finding:
        return Finding(severity, self.name, message, **fields)


INSPECTORS: Registry[type[BaseInspector]] = Registry(
    "inspector", imports="inspector class", import_form="package.module:Class"
)


def register_inspector(cls: type[BaseInspector]) -> type[BaseInspector]:
    """Class decorator: make an inspector available to `diagnose --order` by its `name`."""
    return INSPECTORS.register(cls.name)(cls)


def inspector(spec: str) -> BaseInspector:
    """A registered inspector by name (case-insensitive), or a class by `package.module:Class`."""
    if ":" in spec:
        try:
            cls = import_object(spec, "--order", "inspector class")
        except UserError as error:
            raise UserError(
                f"--order: cannot load inspector '{spec}' ({str(error).removeprefix('--order: ')})"
                "; give 'package.module:Class' importable from here"
            ) from None
        if not (isinstance(cls, type) and issubclass(cls, BaseInspector)):
            raise UserError(f"--order: '{spec}' is not a subclass of BaseInspector")
        return cls()
    lowered = {name.lower(): name for name in INSPECTORS.names()}
    return INSPECTORS.get(lowered.get(spec.lower(), spec), "--order").builder()


class DiagnosisContext:
    """What inspectors share: the workload, its float and quantized models, a few batches of
    calibration inputs, the explored bit range, an output folder, and a place for results one
    inspector computes and another reuses (`cache`).

    Args:
        context: the WorkloadContext of the workload to diagnose.
        out_dir: where inspectors write their tables and plots.
        max_batches: how many calibration batches inspectors run on.
        interactive: ask before applying a recommendation (and the Image question).
        ask: how a question is asked (`input` on a terminal; a test's answers).
    """

    def __init__(
        self,
        context: WorkloadContext,
        out_dir: Path,
        max_batches: int = 4,
        interactive: bool = False,
        ask: Callable[[str], str] = input,
    ) -> None:
        self.context = context
        self.workload = context.workload
        self.out_dir = Path(out_dir)
        self.max_batches = max_batches
        self.interactive = interactive
        self.ask = ask
        self.cache: dict[str, Any] = {}

    @property
    def device(self) -> torch.device:
        """The device the diagnosis runs on."""
        return self.context.device

    @cached_property
    def float_model(self) -> nn.Module:
        return self.context.build_model().eval()

    @cached_property
    def quantized_model(self) -> Any:
        """The workload's QuantizedModel, calibrated from `calibration.file`, or calibrated here
        (not saved) when the file does not exist yet."""
        from model_explorer.operations.pipeline import (
            build_quantized_model,
            calibrate_in_memory,
            calibration_file,
        )
        from model_explorer.operations.pipeline import quantized_model as uncalibrated

        spec = self.workload.require("calibration")
        if spec.file is not None and calibration_file(self.context).exists():
            return build_quantized_model(self.context).eval()
        log.info("no calibration file yet: calibrating in memory for the diagnosis")
        model = uncalibrated(self.context)
        return calibrate_in_memory(model.to(self.device), self.context).eval()

    @cached_property
    def inputs(self) -> list[Tensor]:
        """Up to `max_batches` batches of calibration inputs (the model's first argument)."""
        found = []
        for inputs, _ in self.context.batches("calibrate"):
            found.append(inputs[0] if isinstance(inputs, (list, tuple)) else inputs)
            if len(found) >= self.max_batches:
                break
        return found

    def input_batches(self) -> Iterator[tuple[Tensor]]:
        """The calibration inputs, batch by batch, on the device."""
        for x in self.inputs:
            yield (x.to(self.device),)

    @cached_property
    def bit_range(self) -> tuple[int, int]:
        """The bit widths the workload's search explores (the problem's bit limits), else the
        workload's fixed bits."""
        explored = explored_bits(self.workload.problem.options)
        if self.workload.exploration is not None and explored is not None:
            return explored
        bits = self.workload.quantization.input.num_bits
        return bits, bits

    def has_exploration_data(self) -> bool:
        """Whether the workload has exploration data to score on."""
        return self.context.has_dataset("exploration")


def run_inspectors(
    context: DiagnosisContext,
    order: Sequence[str],
    report: Callable[[Finding], None] | None = None,
) -> list[Finding]:
    """Run the inspectors named in `order`; their findings, in order.

    Args:
        context: the DiagnosisContext they share.
        order: inspector names (`DEFAULT_ORDER`, or `package.module:Class` of your own).
        report: called with each finding as it comes (to print as the run goes), or None.
    """
    chosen = [inspector(spec) for spec in order]
    context.out_dir.mkdir(parents=True, exist_ok=True)
    findings: list[Finding] = []
    for item in chosen:
        log.info("Module: %s", item.name)
        for found in item.run(context):
            findings.append(found)
            if report is not None:
                report(found)
        log.debug("Inspector module has finished (%s)", item.name)
    return findings
