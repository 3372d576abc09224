"""Per-operator output range (min, max, percentiles) over all samples, written as JSON: the
numbers quantization parameters come from. --analysis-args: the JSON file (default
activation_ranges.json)."""

import json

import numpy as np


class ActivationRanges:
    def __init__(self, args: str = "") -> None:
        self.path = args or "activation_ranges.json"
        self.values = {}

    def DefaultOpPost(self, name, opcode, inputs, output) -> None:
        if output is None or output["data"].dtype.kind != "f":
            return
        data = output["data"].ravel()
        entry = self.values.setdefault(
            name, {"opcode": opcode, "min": np.inf, "max": -np.inf, "samples": []}
        )
        entry["min"] = min(entry["min"], float(data.min()))
        entry["max"] = max(entry["max"], float(data.max()))
        entry["samples"].append(np.percentile(np.abs(data), [50, 99, 99.9, 99.99]))

    def EndAnalysis(self) -> None:
        if not self.values:  # no sample ran (a refused input): an earlier file stays as it is
            return
        result = {}
        for name, entry in self.values.items():
            percentiles = np.mean(entry["samples"], axis=0)
            result[name] = {
                "opcode": entry["opcode"],
                "min": entry["min"],
                "max": entry["max"],
                "abs_percentiles": dict(
                    zip(["50", "99", "99.9", "99.99"], map(float, percentiles), strict=True)
                ),
            }
        with open(self.path, "w") as file:
            json.dump(result, file, indent=2)
