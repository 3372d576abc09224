"""Recommendations: the workload overrides of findings, merged into one and into a workload."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from model_explorer.analysis.diagnose.base import SEVERITIES, Finding
from model_explorer.quantization.spec import CalibrationSpec
from model_explorer.workload.original_layout import translate


def _merge(target: dict[str, Any], override: dict[str, Any], path: tuple[str, ...] = ()) -> None:
    for key, value in override.items():
        here = (*path, key)
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value, here)
        elif path and path[-1] == "layer_bounds" and key in target:
            # Two findings raising one layer's bounds: keep the higher lower bound.
            low = max(int(target[key][0]), int(value[0]))
            target[key] = [low, max(low, int(target[key][1]), int(value[1]))]
        else:
            target[key] = value


def merged_recommendations(findings: Sequence[Finding]) -> dict[str, Any]:
    """One override from every finding's recommendation; errors win over warnings over info
    where two set the same scalar."""
    merged: dict[str, Any] = {}
    for found in sorted(findings, key=lambda f: SEVERITIES.index(f.severity)):
        if found.recommendation:
            _merge(merged, _copy(found.recommendation))
    return merged


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_copy(v) for v in value]
    return value


def apply_recommendations(
    data: dict[str, Any], override: dict[str, Any], bit_range: tuple[int, int] | None = None
) -> dict[str, Any]:
    """A copy of a parsed workload file (root `workload:`) with `override` merged into it, in
    this project's layout (a file in the original one is translated first, so that a
    recommended setting and the file's own spelling of it never meet).

    Layer bounds are kept within the explored `bit_range`. When the override changes the model,
    its quantization or its calibration, the calibration file gets a new name, so that the
    calibration made for the old settings is not reused."""
    result = _copy(data)
    result["workload"] = body = translate(result["workload"]).body
    _merge(body, _copy(override))
    calibration = body.get("calibration") or {}
    if "method" in (override.get("calibration") or {}):
        # The recommended method keeps its own options only, not those of the file's method.
        body["calibration"] = calibration = CalibrationSpec.without_other_options(calibration)
    if calibration.get("file") and {"model", "quantization", "calibration"} & set(override):
        path = Path(calibration["file"])
        calibration["file"] = str(path.with_name(f"{path.stem}_recommended{path.suffix}"))
    problem = body.get("problem") or {}
    if bit_range is not None and problem.get("layer_bounds"):
        low_limit, high_limit = bit_range
        for pattern, (low, high) in list(problem["layer_bounds"].items()):
            low = min(max(int(low), low_limit), high_limit)
            problem["layer_bounds"][pattern] = [low, max(low, min(int(high), high_limit))]
    return result
