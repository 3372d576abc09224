"""What a calibration is made from, recorded in its file and compared before the file is used:
the method and its options, the calibration data (its dataset spec: type, path, split,
sample_limit, randomize, batch size, ...) and the workload seed that draws its subset. (The
quantizer settings are compared by calibration_file.py; the weights by their fingerprint.)"""

from __future__ import annotations

from typing import Any

from model_explorer.quantization.spec import CalibrationSpec


def calibration_recipe(spec: CalibrationSpec, seed: int) -> dict[str, Any]:
    """The settings a calibration depends on, as plain data."""
    data = spec.datasets.calibrate if spec.datasets is not None else None
    drawn = data is not None and (data.sample_limit is not None or data.randomize)
    return {
        "method": spec.method,
        "options": spec.options.model_dump(mode="json") if spec.options is not None else {},
        "data": data.model_dump(mode="json", exclude={"workers"}) if data is not None else None,
        "seed": seed if drawn else None,  # it draws the subset only under a limit or shuffle
    }


def recipe_difference(recorded: Any, current: dict[str, Any]) -> str | None:
    """The first setting that differs between a file's recipe and the workload's, named by
    its key (None: alike). A file without a recipe differs in 'the settings it was made
    with'."""
    if recorded == current:
        return None
    if not isinstance(recorded, dict):
        return "settings it does not record (made by an older version)"
    for key, value in current.items():
        theirs = recorded.get(key)
        if theirs == value:
            continue
        if key in ("options", "data") and isinstance(theirs, dict) and isinstance(value, dict):
            where = "calibration" if key == "options" else "calibration.datasets.calibrate"
            for name in sorted(set(theirs) | set(value)):
                if theirs.get(name) != value.get(name):
                    return f"{where}.{name} {theirs.get(name)!r} there, {value.get(name)!r} here"
        where = "seed" if key == "seed" else f"calibration.{key}"
        return f"{where} {theirs!r} there, {value!r} here"
    return "other calibration settings"
