"""A latency table: each layer's time in one runtime for every combination of the forms its
segment's quantizers take, and the prediction of a whole configuration's time from it.

A gene's choices fall into forms: the exported structure a choice gives its quantizer (the
storage type and whether its integers are clipped to fewer levels: `INT8`, `UINT8/clip`,
`INT4`, `INT16/clip`...). Choices of one form export the same nodes with other constants, so
one measurement serves them all. A layer's segment (latency/segments.py) holds its own
quantizers and those of the layers its output reaches, so its time is keyed by the forms of
all of them: that is how a convolution whose output is quantized for an integer successor
fuses into an integer kernel and one before a 16-bit successor does not.

The prediction is the sum of the layers' times, corrected by what a layer sum misses: the
graph's own overhead and what running the segments alone adds or loses (layout changes at
their boundaries), fitted by least squares over the whole graphs measured with the table
(`fit`: intercept + scale x sum). The table is plain data (JSON), keyed by what it was measured
on: a table from another runtime, version, thread count or processor is refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model_explorer.errors import UserError
from model_explorer.fileio import atomic_path
from model_explorer.plan import ROLES

FORMAT = "model_explorer latency table 1"
# What a table must match to be used: the machine's identity.
MACHINE_KEYS = ("runtime", "version", "threads", "cpu", "gpu")


def gene_of(layer: str, setting: str) -> str:
    """The gene (variable) a plan's setting of `layer` is: `<layer>.input_quantizer`."""
    return f"{layer}.{ROLES[setting]}"


def plan_choices(plan: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Gene -> its choice as the table writes it (a bit width or a format's short name), for
    the quantizer settings of a plan."""
    choices = {}
    for layer, settings in plan.items():
        for setting, value in settings.items():
            if setting in ROLES:
                choices[gene_of(layer, setting)] = str(value)
    return choices


@dataclass
class LatencyTable:
    """Per layer: its segment's sites (quantizers) and the time of each combination of their
    forms measured (`times`: key -> Timing.to_dict() and whether the product ran on integers);
    per gene: the form of each choice; fixed sites' forms; the fit; what it was measured on."""

    machine: dict[str, Any]
    workload: dict[str, Any]
    genes: dict[str, dict[str, str]]
    fixed: dict[str, str]
    site_genes: dict[str, str]
    layers: dict[str, dict[str, Any]]
    fit: dict[str, float] = field(default_factory=lambda: {"intercept_ms": 0.0, "scale": 1.0})
    wholes: list[dict[str, Any]] = field(default_factory=list)
    float_ms: dict[str, float] = field(default_factory=dict)
    left_out: dict[str, list[str]] = field(default_factory=dict)

    # -- prediction -------------------------------------------------------------------------
    def site_form(self, site: str, choices: dict[str, str]) -> str:
        gene = self.site_genes.get(site)
        if gene is None:
            return self.fixed[site]
        return self.genes[gene][choices[gene]]

    def key(self, layer: str, choices: dict[str, str]) -> str:
        return key_of(self.site_form(site, choices) for site in self.layers[layer]["sites"])

    def layer_times(self, plan: dict[str, dict[str, Any]]) -> dict[str, float]:
        """Each layer's measured time (ms) under the plan's choices; a combination the table
        lacks takes the layer's slowest measured one."""
        choices = plan_choices(plan)
        found = {}
        for layer, entry in self.layers.items():
            timing = entry["times"].get(self.key(layer, choices))
            if timing is None:
                timing = max(entry["times"].values(), key=lambda t: t["median_ms"])
            found[layer] = timing["median_ms"]
        return found

    def segment_sum(self, plan: dict[str, dict[str, Any]]) -> float:
        return sum(self.layer_times(plan).values())

    def predict(self, plan: dict[str, dict[str, Any]]) -> float:
        """The plan's predicted time per batch in milliseconds."""
        return self.fit["intercept_ms"] + self.fit["scale"] * self.segment_sum(plan)

    # -- files ------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, **self.__dict__}

    def save(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as temporary:
            temporary.write_text(json.dumps(self.to_dict(), indent=1))
        return path

    @classmethod
    def load(cls, path: Path, where: str) -> LatencyTable:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise UserError(f"{where}: '{path}' is not a latency table ({error})") from None
        if not isinstance(data, dict) or data.pop("format", None) != FORMAT:
            raise UserError(
                f"{where}: '{path}' is not a latency table written by model-explorer latency"
            )
        return cls(**data)

    def refuse_other(self, machine: dict[str, Any], workload: dict[str, Any], where: str) -> None:
        """One sentence where this table was measured on another runtime, version, thread
        count or processor than `machine`, or for another model or search space."""
        for key in MACHINE_KEYS:
            if self.machine.get(key) != machine.get(key):
                raise UserError(
                    f"{where}: the latency table was measured with {key} "
                    f"{self.machine.get(key)!r}, here it is {machine.get(key)!r}; measure one "
                    "here with model-explorer latency WORKLOAD --runtime "
                    f"{machine.get('runtime')} (timings do not carry across machines)"
                )
        for key, value in workload.items():
            if self.workload.get(key) != value:
                raise UserError(
                    f"{where}: the latency table was measured for another {key} than this "
                    "workload's; measure it again with model-explorer latency WORKLOAD"
                )


def key_of(forms: Any) -> str:
    return " | ".join(forms)


def layer_rows(table: LatencyTable) -> list[dict[str, Any]]:
    """Per layer: how many form combinations were measured, the fastest and the slowest (ms
    and forms) and how many of them ran the product on integers."""
    rows = []
    for layer, entry in table.layers.items():
        times = entry["times"]
        fastest = min(times, key=lambda k: times[k]["median_ms"])
        slowest = max(times, key=lambda k: times[k]["median_ms"])
        rows.append(
            {
                "layer": layer,
                "combinations": len(times),
                "integer": sum(1 for t in times.values() if t["integer"]),
                "fastest_ms": times[fastest]["median_ms"],
                "fastest": fastest,
                "slowest_ms": times[slowest]["median_ms"],
                "slowest": slowest,
            }
        )
    return rows


def fit_errors(table: LatencyTable) -> list[float]:
    """The prediction's relative error on each whole graph the table was measured with."""
    return [
        abs(table.predict(whole["plan"]) - whole["median_ms"]) / whole["median_ms"]
        for whole in table.wholes
    ]
