"""The Activation inspector: activations that quantize badly, found among the float model's
operators, as Hailo's Activation inspector looks for them (SiLU, swish with beta != 1), and a
few more that share SiLU's shape."""

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

# The activations beyond Hailo's list, by ATen operator, with the bottom of their negative dip
# (SiLU's is -0.278): smooth (Hardswish: piecewise) and non-monotone, like SiLU. ReLU-like
# monotone ones (LeakyReLU, ELU, SELU) and bounded ones (sigmoid, tanh) are left out.
LIKE_SILU = {"gelu": -0.170, "mish": -0.309, "hardswish": -0.375}
# The activations that quantize like their input, counted in the info finding of a model that
# has none of the above (ReLU6 runs as hardtanh).
PLAIN = ("relu", "hardtanh", "leaky_relu", "elu", "selu", "sigmoid", "tanh", "softplus")


@register_inspector
class Activation(BaseInspector):
    """Activations that cost accuracy once the next layer's input is quantized.

    SiLU (nn.SiLU, F.silu, or x * sigmoid(x) written out) is a warning, as Hailo's: it might
    reduce the quantized model's accuracy, consider retraining with ReLU. A swish with
    beta != 1 (x * sigmoid(beta * x) or x * sigmoid(x / t), found among the operators: x
    scaled by a constant, into a sigmoid whose output multiplies the same x) is a warning too,
    as Hailo's: Hailo cannot represent it natively, so it runs as separate operators (a scale,
    a sigmoid, a product), each quantized there, and the next layer's input has SiLU's dip
    besides. (The fake-quantized model here quantizes layer inputs only: the search does not
    see the cost of those operators.)

    GELU, Mish and Hardswish are info (this project's choice; Hailo names none of them): they
    share SiLU's shape, a shallow negative dip (down to -0.17, -0.31, -0.38; SiLU's -0.28)
    before a wide positive range. A quantizer after them must stay signed (`unsigned: auto`
    cannot make it unsigned as after a ReLU), so one bit of its grid goes to a dip a few
    tenths deep; and at the low widths a search explores, the grid step exceeds the dip
    (4 bits, amax 6: a step of 0.86), so the dip and the non-monotone bend the network relies
    on round to 0. Monotone ones (LeakyReLU, ELU) and bounded ones (sigmoid, tanh) quantize
    like their input and are left out.

    Layers are named by the module running the operator. The operators come from one sample of
    the calibration data. No workload setting changes an activation: no recommendation."""

    name = "Activation"
    priority = LOW

    def run(self, context: DiagnosisContext) -> list[Finding]:
        from model_explorer.analysis.hooks.recording import Recorder

        recording = Recorder(context.float_model).run(
            (context.inputs[0][:1].to(context.device),), ["input"]
        )
        silu = [c.module for c in recording.calls if _kind(c) == "silu"]
        swish: dict[float, list[str]] = {}
        for module, beta in _swish_calls(recording):
            if abs(beta - 1) <= 1e-6:
                silu.append(module)  # SiLU written out
            else:
                swish.setdefault(round(beta, 6), []).append(module)
        alike: dict[str, list[str]] = {}
        for call in recording.calls:
            if _kind(call) in LIKE_SILU:
                alike.setdefault(_kind(call), []).append(call.module)
        log.debug("Activation: SiLU in %s; swish by beta %s; alike %s", silu, swish, alike)
        findings = []
        if silu:
            findings.append(self._silu(_unique(silu)))
        for beta, modules in swish.items():
            findings.append(self._swish(beta, _unique(modules)))
        for kind, modules in alike.items():
            modules = _unique(modules)
            findings.append(
                self.finding(
                    "info",
                    f"{len(modules)} layers use {kind} ({_listed(modules)}): smooth and "
                    f"non-monotone like SiLU (a dip to {LIKE_SILU[kind]}), which an integer grid "
                    "at low widths cuts; check their quantization error, or retrain with ReLU",
                    **_where(modules),
                )
            )
        return findings or [self._plain(recording)]

    def _plain(self, recording: Any) -> Finding:
        """What the model uses instead, when nothing above is found."""
        counts: dict[str, int] = {}
        for call in recording.calls:
            if _kind(call) in PLAIN:
                counts[_kind(call)] = counts.get(_kind(call), 0) + 1
        used = ", ".join(f"{kind} x{count}" for kind, count in counts.items()) or "none"
        message = f"no SiLU, swish or SiLU-like activation; activations: {used}"
        if "hardtanh" in counts:
            message += " (ReLU6 runs as hardtanh: bounded, the quantizers after it unsigned)"
        return self.finding("info", message, evidence={"activations": counts})

    def _silu(self, modules: list[str]) -> Finding:
        return self.finding(
            "warning",
            f"{len(modules)} layers use SiLU ({_listed(modules)}), which might reduce the "
            "quantized model's accuracy; if possible, consider retraining with ReLU",
            **_where(modules),
        )

    def _swish(self, beta: float, modules: list[str]) -> Finding:
        return self.finding(
            "warning",
            f"{len(modules)} layers use swish with beta {beta:.4g} (x * sigmoid({beta:.4g} x); "
            f"{_listed(modules)}), which Hailo cannot represent natively (it runs as separate "
            "quantized operators) and might lower the accuracy; consider retraining with ReLU "
            "(or SiLU, beta 1, though its accuracy might suffer too)",
            **_where(modules, beta=beta),
        )


def _kind(call: Any) -> str:
    return call.packet.rstrip("_")  # in-place operators (silu_) as their kind


def _unique(names: list[str]) -> list[str]:
    return list(dict.fromkeys(names))


def _where(modules: list[str], **evidence: Any) -> dict[str, Any]:
    """A finding's layer (the one module, if one) and its evidence."""
    layer = (modules[0] or None) if len(modules) == 1 else None
    return {"layer": layer, "evidence": {"layers": modules, **evidence}}


def _listed(names: list[str], shown: int = 5) -> str:
    more = f", ... {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(n or "(model)" for n in names[:shown]) + more


def _swish_calls(recording: Any) -> list[tuple[str, float]]:
    """(module, beta) of every x * sigmoid(beta * x) with a constant beta (x * sigmoid(x):
    beta 1; x * sigmoid(x / t): beta 1/t), by the module running the product."""
    from model_explorer.analysis.hooks.recording import Value

    producer = {id(v.base): c for c in recording.calls for v in c.outputs}
    found = []
    for call in recording.calls:
        if _kind(call) != "mul" or len(call.args) < 2:
            continue
        for x, gate in (call.args[:2], call.args[1::-1]):
            if not (isinstance(x, Value) and isinstance(gate, Value)):
                continue
            source = producer.get(id(gate.base))
            if source is None or _kind(source) != "sigmoid" or not source.args:
                continue
            inner = source.args[0]
            if isinstance(inner, Value) and inner.base is x.base:
                found.append((call.module, 1.0))
                break
            scaled = producer.get(id(inner.base)) if isinstance(inner, Value) else None
            beta = _scale_of(scaled, x) if scaled is not None else None
            if beta is not None:
                found.append((call.module, beta))
                break
    return found


def _scale_of(call: Any, x: Any) -> float | None:
    """The constant `call` scales `x` by: x * c, c * x, or x / c (1/c)."""
    from model_explorer.analysis.hooks.recording import Value

    kind = _kind(call)
    if kind not in ("mul", "div") or len(call.args) < 2:
        return None
    pairs = [call.args[:2]] if kind == "div" else [call.args[:2], call.args[1::-1]]
    for value, other in pairs:
        if not (isinstance(value, Value) and value.base is x.base):
            continue
        constant = _constant(other)
        if constant is not None and constant != 0:
            return 1 / constant if kind == "div" else constant
    return None


def _constant(value: Any) -> float | None:
    from model_explorer.analysis.hooks.recording import Value

    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, Value) and value.is_const and value.data.size == 1:
        return float(value.data.reshape(-1)[0])
    return None
