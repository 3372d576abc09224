"""A per-quantizer configuration from outside (another tool's choice, a hand-made plan), read
from JSON or YAML and checked against a model's quantizers before it is applied
(`evaluate --plan`).

Two forms are read: quantizer names to a bit width or a format's short name,
`{"conv1.input_quantizer": 8, "conv1.weight_quantizer": "int4"}`, or this project's plan,
layer names to their settings, `{"conv1": {"input_bits": 8, "weight_format": "mxfp4"}}`
(what a result stores with every individual). Quantizers a file does not name keep the
workload's settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from model_explorer.errors import UserError, did_you_mean
from model_explorer.plan import FORMAT_OF, Plan, apply_plan, variable_setting


def read_plan_file(path: str | Path) -> dict[str, Any]:
    """The mapping a .json, .yaml or .yml file holds."""
    from model_explorer.schema.yamlfile import read_yaml

    file = Path(path)
    where = f"--plan '{file}'"
    if not file.is_file():
        raise UserError(f"{where}: the file does not exist; give a JSON or YAML plan")
    if file.suffix.lower() == ".json":
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise UserError(f"{where}: not valid JSON ({error})") from None
    elif file.suffix.lower() in (".yaml", ".yml"):
        data = read_yaml(file)
    else:
        raise UserError(f"{where}: give a .json, .yaml or .yml file")
    if not isinstance(data, dict) or not data:
        raise UserError(f"{where}: holds no mapping of quantizer names to settings")
    return data


def plan_from_file(data: dict[str, Any], quantizers: list[str], where: str) -> Plan:
    """The plan of a file's mapping, every name checked against the model's `quantizers`
    (names such as `conv1.input_quantizer`)."""
    layers = {name.rsplit(".", 1)[0] for name in quantizers}
    plan: Plan = {}
    for key, value in data.items():
        if isinstance(value, dict):  # this project's plan: a layer's settings
            if key not in layers:
                raise UserError(f"{where}: '{key}' is no quantized layer{_hint(key, layers)}")
            plan.setdefault(key, {}).update(value)
            continue
        if key not in quantizers:
            hint = _hint(key, quantizers)
            raise UserError(f"{where}: '{key}' is no quantizer of the model{hint}")
        layer, setting = variable_setting(key)
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise UserError(f"{where}: '{key}' is {value!r}; give a bit width or a format name")
        if isinstance(value, str):
            setting = FORMAT_OF[setting]
        plan.setdefault(layer, {})[setting] = value
    return plan


def _hint(name: str, known: Any) -> str:
    return did_you_mean(name, sorted(known)) or f"; known: {', '.join(sorted(known)[:4])}, ..."


def apply_plan_file(model: Any, path: str | Path) -> Plan:
    """Read, check and apply a plan file to a QuantizedModel; the plan applied."""
    where = f"--plan '{path}'"
    plan = plan_from_file(read_plan_file(path), list(model.quantizers), where)
    try:
        apply_plan(plan, model)
    except (ValueError, KeyError) as error:
        raise UserError(f"{where}: {error}") from None
    return plan


__all__ = ["apply_plan_file", "plan_from_file", "read_plan_file"]
