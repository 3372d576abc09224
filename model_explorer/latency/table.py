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
graph's own overhead and what running the segments alone adds or loses (each integer segment
alone converts its layout at both boundaries, which consecutive integer layers in the whole
graph do not), fitted over the whole graphs measured with the table (`fit`: intercept +
scale x sum + per_integer x the layers on integer kernels + per_transition x the passages
between integer and float kernels, where a runtime converts layout and precision, +
per_float_weight x the weights it dequantizes to float at run time). The table
is plain data (JSON), keyed by what it was measured on: a table from another runtime,
version, thread count or processor is refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from model_explorer.errors import UserError
from model_explorer.fileio import atomic_path
from model_explorer.plan import ROLES

FORMAT = "model_explorer latency table 1"
# The fit's coefficient of each of LatencyTable.features, by name.
FEATURES = ("scale", "per_integer_ms", "per_transition_ms", "per_float_million_weights_ms")
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
    left_out: dict[str, list[str]] = field(default_factory=dict)

    # -- prediction -------------------------------------------------------------------------
    def site_form(self, site: str, choices: dict[str, str]) -> str:
        gene = self.site_genes.get(site)
        if gene is None:
            return self.fixed[site]
        return self.genes[gene][choices[gene]]

    def key(self, layer: str, choices: dict[str, str]) -> str:
        return key_of(self.site_form(site, choices) for site in self.layers[layer]["sites"])

    def measured(self, plan: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any] | None]:
        """Each layer's measurement of the combination the plan's choices give it (None where
        the table lacks it)."""
        choices = plan_choices(plan)
        return {
            layer: entry["times"].get(self.key(layer, choices))
            for layer, entry in self.layers.items()
        }

    def layer_times(
        self, plan: dict[str, dict[str, Any]], measured: dict[str, Any] | None = None
    ) -> dict[str, float]:
        """Each layer's measured time (ms) under the plan's choices: inside the whole graphs
        where the runtime profiles its nodes (`in_graph_ms`), else its segment's alone less the
        cost of calling the runtime on it (`call_ms`, which the whole graph pays once); a
        combination the table lacks takes the layer's slowest measured one."""
        measured = self.measured(plan) if measured is None else measured
        found = {}
        for layer, entry in self.layers.items():
            timing = measured[layer]
            if timing is None:
                timing = max(entry["times"].values(), key=lambda t: t["median_ms"])
            if "in_graph_ms" in timing:  # the runtime's own profile of the whole graphs
                found[layer] = timing["in_graph_ms"]
            else:
                found[layer] = max(timing["median_ms"] - entry.get("call_ms", 0.0), 0.0)
        return found

    def segment_sum(self, plan: dict[str, dict[str, Any]]) -> float:
        return sum(self.layer_times(plan).values())

    def on_integers(
        self, plan: dict[str, dict[str, Any]], measured: dict[str, Any] | None = None
    ) -> dict[str, bool]:
        """Whether each layer runs on an integer kernel under the plan's choices (not where
        the table lacks its combination)."""
        measured = self.measured(plan) if measured is None else measured
        return {layer: bool(t and t["integer"]) for layer, t in measured.items()}

    def successors(self) -> list[tuple[str, str]]:
        """(layer, layer its output reaches): a layer's segment holds the input quantizer of
        each layer it feeds."""
        inputs = {
            site: gene.rpartition(".")[0]
            for site, gene in self.site_genes.items()
            if gene.endswith(".input_quantizer")
        }
        return [
            (layer, inputs[site])
            for layer, entry in self.layers.items()
            for site in entry["sites"]
            if site in inputs and inputs[site] != layer
        ]

    def features(self, plan: dict[str, dict[str, Any]]) -> list[float]:
        """What the correction reads (FEATURES): the layer sum; the layers on integer kernels
        (alone, each such segment changes layout at both boundaries); the passages between
        integer and float kernels (where the whole graph changes layout and precision); and
        the millions of weights dequantized to float at run time, those of the layers not on
        integer kernels (dequantized at every call; in the whole graph they leave the caches,
        which a segment run alone keeps warm)."""
        measured = self.measured(plan)
        integer = self.on_integers(plan, measured)
        weights = sum(e.get("weights", 0) for n, e in self.layers.items() if not integer[n])
        return [
            sum(self.layer_times(plan, measured).values()),
            sum(integer.values()),
            sum(integer[a] != integer[b] for a, b in self.successors()),
            weights / 1e6,
        ]

    def predict(self, plan: dict[str, dict[str, Any]]) -> float:
        """The plan's predicted time per batch in milliseconds."""
        fit = self.fit
        return fit["intercept_ms"] + sum(
            fit.get(name, 0.0) * value
            for name, value in zip(FEATURES, self.features(plan), strict=True)
        )

    def describe(self, layer: str, key: str) -> str:
        """A combination in words: each quantizer of the layer's segment (its gene's name, a
        fixed one's site) with its form."""
        names = [
            self.site_genes.get(site, site).removesuffix("_quantizer")
            for site in self.layers[layer]["sites"]
        ]
        return " ".join(f"{n}={f}" for n, f in zip(names, key.split(" | "), strict=True))

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
                "fastest": table.describe(layer, fastest),
                "slowest_ms": times[slowest]["median_ms"],
                "slowest": table.describe(layer, slowest),
            }
        )
    return rows


def fit_errors(table: LatencyTable) -> list[float]:
    """The prediction's relative error on each whole graph the table was measured with."""
    return [
        abs(table.predict(whole["plan"]) - whole["median_ms"]) / whole["median_ms"]
        for whole in table.wholes
    ]


def fit_correction(wholes: list[dict[str, Any]]) -> dict[str, float]:
    """The correction of the layer sum (LatencyTable.predict), fitted over the whole graphs
    measured by least squares with a soft-L1 loss (a whole graph timed during a burst of load
    moves it little), the layer sum's scale kept >= 0; a feature that does not vary among the
    graphs is left out, and with too few graphs, the median difference alone."""
    from scipy.optimize import least_squares

    measured = np.array([w["median_ms"] for w in wholes])
    features = np.array([w["features"] for w in wholes], dtype=float)
    names = list(FEATURES)
    fit = dict.fromkeys(names, 0.0) | {"scale": 1.0}
    if len(wholes) < 6 or np.ptp(features[:, 0]) <= 1e-9:
        return fit | {"intercept_ms": float(np.median(measured - features[:, 0]))}
    used = [i for i in range(len(names)) if np.ptp(features[:, i]) > 0]
    design = np.column_stack([np.ones(len(wholes)), features[:, used]])
    start = np.linalg.lstsq(design, measured, rcond=None)[0]
    start[1] = max(start[1], 0.0)
    spread = float(np.median(np.abs(measured - design @ start))) or float(np.median(measured)) / 100
    lower = [-np.inf, 0.0] + [-np.inf] * (len(used) - 1)
    fitted = least_squares(
        lambda p: design @ p - measured,
        start,
        loss="soft_l1",
        f_scale=spread,
        bounds=(lower, np.inf),
    ).x
    fit["intercept_ms"] = float(fitted[0])
    for index, value in zip(used, fitted[1:], strict=True):
        fit[names[index]] = float(value)
    return fit
