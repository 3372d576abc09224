"""The Activation inspector: activations that quantize badly, found in the float model's
modules and operators, as Hailo's Activation inspector looks for them."""

from __future__ import annotations

import logging
from typing import Any

from model_explorer.analysis.diagnose.base import (
    LOW,
    BaseInspector,
    DiagnosisContext,
    Finding,
    register_inspector,
)

log = logging.getLogger(__name__)

# Smooth, non-monotone activations with a negative dip: an integer grid sized for their wide
# positive range has few levels for the dip, and their curve near 0 is what the model relies
# on. Hailo names SiLU; Mish, GELU and Hardswish share its shape.
LIKE_SILU = {"Mish": "mish", "GELU": "gelu", "Hardswish": "hardswish"}


@register_inspector
class Activation(BaseInspector):
    """SiLU (nn.SiLU or F.silu) is a warning, as Hailo's: it may reduce the accuracy of the
    quantized model, consider retraining with ReLU. A swish with beta != 1 (x * sigmoid(beta
    * x), found as operators: a multiplication of x by a constant feeding a sigmoid whose
    output multiplies the same x) is a warning too: no deployment has it as one operator, so
    it runs as three, each quantized. Mish, GELU and Hardswish, which share SiLU's shape, are
    info. No workload setting changes an activation: no recommendation."""

    name = "Activation"
    priority = LOW

    def run(self, context: DiagnosisContext) -> list[Finding]:
        from model_explorer.analysis.hooks.recording import Recorder

        recording = Recorder(context.float_model).run(
            (context.inputs[0][:1].to(context.device),), ["input"]
        )
        silu, swish, alike = _silu_calls(recording), _swish_calls(recording), {}
        for call in recording.calls:
            kind = call.packet.rstrip("_")
            if kind in LIKE_SILU.values():
                alike.setdefault(kind, []).append(call.module)
        findings = []
        if silu:
            findings.append(
                self.finding(
                    "warning",
                    f"{len(silu)} layers use SiLU ({_listed(silu)}), which might reduce the "
                    "quantized model's accuracy; if possible, consider retraining with ReLU",
                    evidence={"layers": silu},
                )
            )
        for module, beta in swish:
            findings.append(
                self.finding(
                    "warning",
                    f"swish with beta {beta:.4g} (x * sigmoid({beta:.4g} x)): it runs as three "
                    "quantized operators and might cost accuracy; consider retraining with "
                    "ReLU (or SiLU, beta 1, though accuracy might still suffer)",
                    layer=module or None,
                    evidence={"beta": beta},
                )
            )
        for kind, modules in alike.items():
            findings.append(
                self.finding(
                    "info",
                    f"{len(modules)} {kind} activations ({_listed(modules)}): smooth and "
                    "non-monotone like SiLU; check their layers' quantization error",
                    evidence={"layers": modules},
                )
            )
        log.debug("Activation: silu %s, swish %s, alike %s", silu, swish, alike)
        return findings


def _listed(names: list[str], shown: int = 5) -> str:
    more = f", ... {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(n or "(model)" for n in names[:shown]) + more


def _silu_calls(recording: Any) -> list[str]:
    return [c.module for c in recording.calls if c.packet.rstrip("_") == "silu"]


def _swish_calls(recording: Any) -> list[tuple[str, float]]:
    """(module, beta) of every x * sigmoid(beta * x) with a constant beta != 1."""
    from model_explorer.analysis.hooks.recording import Value

    producer = {id(v.base): c for c in recording.calls for v in c.outputs}
    found = []
    for call in recording.calls:
        if call.packet.rstrip("_") != "mul" or len(call.args) < 2:
            continue
        for x, gate in (call.args[:2], call.args[1::-1]):
            source = producer.get(id(gate.base)) if isinstance(gate, Value) else None
            if source is None or source.packet.rstrip("_") != "sigmoid":
                continue
            scaled = producer.get(id(source.args[0].base))
            if scaled is None or scaled.packet.rstrip("_") != "mul":
                continue
            beta = _scale_of(scaled, x)
            if beta is not None and abs(beta - 1) > 1e-6:
                found.append((call.module, beta))
    return found


def _scale_of(call: Any, x: Any) -> float | None:
    """The constant `call` multiplies `x` by, if it is x * c or c * x."""
    from model_explorer.analysis.hooks.recording import Value

    for value, other in (call.args[:2], call.args[1::-1]):
        if isinstance(value, Value) and isinstance(x, Value) and value.base is x.base:
            if isinstance(other, (int, float)):
                return float(other)
            if isinstance(other, Value) and other.is_const and other.data.size == 1:
                return float(other.data.reshape(-1)[0])
    return None
