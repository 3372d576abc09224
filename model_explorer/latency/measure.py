"""Measuring a latency table (latency/table.py) for a calibrated QuantizedModel in a runtime.

Each gene's choices are sorted into forms by encoding its quantizer at each choice (the
export's own encoder: a choice it cannot write is left out of the gene, with the reason).
Then whole configurations are exported as `export` writes them, chosen so that every layer
meets every combination of its segment's forms, and cut into segments (latency/segments.py);
each new combination's segment becomes a graph of its own. The segments and the whole graphs
are timed together in the runtime, interleaved (latency/timing.py), and the whole graphs fit
the correction of the layer sum.
"""

from __future__ import annotations

import itertools
import random
import tempfile
import warnings
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
import torch
from onnx import TensorProto

from model_explorer.deployment.encodings import encode
from model_explorer.deployment.export import export_qdq, quantizers_of
from model_explorer.deployment.runtimes import Runtime
from model_explorer.errors import UserError
from model_explorer.latency.profile import in_graph_times
from model_explorer.latency.running import call_model, runner
from model_explorer.latency.segments import inferred, segment_model, segments
from model_explorer.latency.table import LatencyTable, fit_correction, key_of
from model_explorer.latency.timing import Timing, interleaved
from model_explorer.plan import FORMAT_OF, apply_plan, current_plan, variable_setting

# Whole configurations exported at most: the combinations not met by then take the layer's
# slowest measured one (said in the table's left_out).
MAX_EXPORTS = 48


@dataclass
class Measurement:
    """What is being measured: per gene its choices by form, the fixed sites' forms, and the
    graphs to time (segments by layer and key, whole configurations by plan)."""

    genes: dict[str, dict[str, str]] = field(default_factory=dict)
    site_genes: dict[str, str] = field(default_factory=dict)
    fixed: dict[str, str] = field(default_factory=dict)
    sites: dict[str, list[str]] = field(default_factory=dict)
    segments: dict[tuple[str, str], Path] = field(default_factory=dict)
    wholes: list[tuple[dict[str, dict[str, Any]], Path]] = field(default_factory=list)
    # per layer, a graph taking its segment's inputs and computing nothing: the call's cost
    calls: dict[str, Path] = field(default_factory=dict)
    # per whole graph: each layer's combination, and which layer each node's segment is
    whole_keys: list[dict[str, str]] = field(default_factory=list)
    owners: list[dict[str, str]] = field(default_factory=list)
    left_out: dict[str, list[str]] = field(default_factory=dict)


def form_of(quantizer: Any, weight: torch.Tensor | None, where: str) -> str:
    """The exported structure of a quantizer as it is set now: its storage type, `/clip` where
    its integers are clipped to fewer levels, `/gN` for blocks of N."""
    encoding = encode(quantizer, weight, where)
    form = TensorProto.DataType.Name(encoding.onnx_type)
    if encoding.clipped:
        form += "/clip"
    if encoding.block_size is not None:
        form += f"/g{encoding.block_size}"
    return form


def gene_forms(model: Any, genes: dict[str, list[Any]], measurement: Measurement) -> None:
    """Each gene's choices by form, and the export's site name of each gene's quantizer; a
    choice the export cannot write is left out (recorded in `left_out`)."""
    site_of = {id(quantizer): name for name, quantizer in quantizers_of(model)}
    saved = current_plan(model)
    try:
        for gene, choices in genes.items():
            layer_name, setting = variable_setting(gene)
            layer = model.layers[layer_name]
            quantizer = model.quantizers[gene]
            weight = layer.weight.detach() if setting.startswith("weight") else None
            measurement.site_genes[site_of[id(quantizer)]] = gene
            forms = measurement.genes.setdefault(gene, {})
            for choice in choices:
                _set(model, layer_name, setting, choice)
                try:
                    forms[str(choice)] = form_of(quantizer, weight, f"quantizer '{gene}'")
                except UserError as error:
                    measurement.left_out.setdefault(gene, []).append(f"{choice}: {error}")
    finally:
        apply_plan(saved, model)
    for name, quantizer in quantizers_of(model):
        if name not in measurement.site_genes:
            measurement.fixed[name] = form_of(quantizer, None, f"quantizer '{name}'")


def _set(model: Any, layer: str, setting: str, choice: Any) -> None:
    apply_plan({layer: {_setting(setting, choice): choice}}, model)


def _setting(setting: str, choice: Any) -> str:
    """The plan's setting a gene's choice goes into: a bit width's, or a format's name's."""
    return FORMAT_OF[setting] if isinstance(choice, str) else setting


def representative_plan(measurement: Measurement, forms: dict[str, str]) -> dict[str, dict]:
    """A plan giving each gene the first of its choices of the form `forms` names."""
    plan: dict[str, dict[str, Any]] = {}
    for gene, form in forms.items():
        choice = next(c for c, f in measurement.genes[gene].items() if f == form)
        layer, setting = variable_setting(gene)
        value: Any = int(choice) if choice.lstrip("-").isdigit() else choice
        plan.setdefault(layer, {})[_setting(setting, value)] = value
    return plan


class Planner:
    """Chooses configurations so that every layer meets every combination of its sites'
    forms: each new plan first gives the layers, in a shuffled order, a combination they have
    not met whose genes are still free, then fills the rest at random."""

    def __init__(self, measurement: Measurement, seed: int) -> None:
        self.measurement = measurement
        self.random = random.Random(seed)
        self.missing = {
            layer: set(itertools.product(*(self._forms(site) for site in sites)))
            for layer, sites in measurement.sites.items()
        }

    def _forms(self, site: str) -> list[str]:
        gene = self.measurement.site_genes.get(site)
        if gene is None:
            return [self.measurement.fixed[site]]
        return sorted(set(self.measurement.genes[gene].values()))

    def done(self) -> bool:
        return not any(self.missing.values())

    def next_forms(self) -> dict[str, str]:
        chosen: dict[str, str] = {}
        layers = list(self.missing)
        self.random.shuffle(layers)
        for layer in layers:
            sites = self.measurement.sites[layer]
            for combination in sorted(self.missing[layer]):
                pairs = list(zip(sites, combination, strict=True))
                if all(self._fits(site, form, chosen) for site, form in pairs):
                    for site, form in pairs:
                        gene = self.measurement.site_genes.get(site)
                        if gene is not None:
                            chosen[gene] = form
                    break
        for gene, forms in self.measurement.genes.items():
            if gene not in chosen:
                chosen[gene] = self.random.choice(sorted(set(forms.values())))
        return chosen

    def _fits(self, site: str, form: str, chosen: dict[str, str]) -> bool:
        gene = self.measurement.site_genes.get(site)
        return gene is None or chosen.get(gene, form) == form

    def met(self, layer: str, combination: tuple[str, ...]) -> None:
        self.missing[layer].discard(combination)


def uniform_forms(measurement: Measurement) -> list[dict[str, str]]:
    """The configurations with every input at one form and every weight at one form, for each
    pair of forms: the corners of the space (all 8-bit, all narrow), where fronts lie,
    measured whole."""
    forms = {gene: sorted(set(f.values())) for gene, f in measurement.genes.items()}
    roles: dict[str, list[str]] = {}
    for gene, found in forms.items():
        role = gene.rpartition(".")[2]
        roles[role] = sorted(set(roles.get(role, [])) | set(found))
    corners = []
    for chosen in itertools.product(*roles.values()):
        pick = dict(zip(roles, chosen, strict=True))
        corner = {}
        for gene, found in forms.items():
            wanted = pick[gene.rpartition(".")[2]]
            corner[gene] = wanted if wanted in found else found[-1]
        corners.append(corner)
    return corners


def export_plans(
    model: Any, example: torch.Tensor, measurement: Measurement, folder: Path, seed: int
) -> None:
    """Export configurations until every layer has met every combination (or MAX_EXPORTS),
    keeping each new combination's segment and each whole graph."""
    layers = list(model.layers)
    saved = current_plan(model)
    planner: Planner | None = None
    try:
        uniform = uniform_forms(measurement)
        for index in range(MAX_EXPORTS):
            # first every gene at its first form, its second..., then what the planner picks
            forms = uniform[index] if index < len(uniform) else planner.next_forms()  # type: ignore[union-attr]
            plan = representative_plan(measurement, forms)
            apply_plan(plan, model)
            path = folder / f"whole_{index}.onnx"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                export_qdq(model, example, path)
            proto = onnx.load(str(path))
            found, _ = segments(proto, layers)
            if planner is None:
                sites = measurement.site_genes.keys() | measurement.fixed.keys()
                measurement.sites = {s.layer: s.sites(sites) for s in found}
                planner = Planner(measurement, seed)
            measurement.wholes.append((plan, path))
            measurement.owners.append({n.name: s.layer for s in found for n in s.nodes})
            measurement.whole_keys.append({})
            typed = inferred(proto)
            for segment in found:
                combination = tuple(
                    forms[measurement.site_genes[site]]
                    if site in measurement.site_genes
                    else measurement.fixed[site]
                    for site in measurement.sites[segment.layer]
                )
                key = (segment.layer, key_of(combination))
                measurement.whole_keys[-1][segment.layer] = key[1]
                if key not in measurement.segments:
                    target = folder / f"segment_{len(measurement.segments)}.onnx"
                    alone = segment_model(proto, segment, typed)
                    onnx.save(alone, str(target))
                    measurement.segments[key] = target
                    if segment.layer not in measurement.calls:
                        measurement.calls[segment.layer] = folder / f"call_{segment.layer}.onnx"
                        onnx.save(call_model(alone), str(measurement.calls[segment.layer]))
                planner.met(segment.layer, combination)
            if planner.done():
                break
    finally:
        apply_plan(saved, model)
    if planner is not None:
        for layer, missing in planner.missing.items():
            if missing:
                measurement.left_out[layer] = [key_of(c) for c in sorted(missing)]


def time_graphs(
    measurement: Measurement, make_runtime: Callable[[], Runtime], batch: int, repeats: int
) -> tuple[list[tuple[str, str]], list[Timing], list[bool]]:
    """Time the segments and the calls together, interleaved, then the whole graphs among
    themselves: the segments the runtime could run (one it refuses is left out, with its
    reason), every timing (those segments', then the whole graphs', then the calls') and
    whether each segment ran its product on integers."""
    keys = list(measurement.segments)
    runs, integer = [], []
    with ExitStack() as held:  # each runtime deactivated once its graphs are timed
        for layer, key in list(keys):
            try:
                runtime = held.enter_context(make_runtime())
                run, on_integers = runner(runtime, measurement.segments[(layer, key)], batch)
            except Exception as error:  # noqa: BLE001 - whatever the runtime refuses, said
                reason = str(error).splitlines()[0] if str(error) else type(error).__name__
                refused = f"{key} (the runtime: {reason})"
                measurement.left_out.setdefault(layer, []).append(refused)
                keys.remove((layer, key))
                continue
            runs.append(run)
            integer.append(on_integers)
        for path in measurement.calls.values():
            runs.append(runner(held.enter_context(make_runtime()), path, batch)[0])
        parts = interleaved(runs, repeats)
    # the whole graphs on their own, as the front is timed after a search and a user runs a
    # model: not among hundreds of other graphs a runtime holds threads and memory for; one
    # holding a form the runtime refuses is left out
    runs = []
    with ExitStack() as held:
        for index in reversed(range(len(measurement.wholes))):
            try:
                runtime = held.enter_context(make_runtime())
                runs.insert(0, runner(runtime, measurement.wholes[index][1], batch)[0])
            except Exception:  # noqa: BLE001 - its segments said why
                for kept in (measurement.wholes, measurement.whole_keys, measurement.owners):
                    del kept[index]
        wholes = interleaved(runs, repeats)
    calls = parts[len(keys) :]
    return keys, parts[: len(keys)] + wholes + calls, integer


def refuse_forms(measurement: Measurement, measured: set[tuple[str, str]]) -> None:
    """A quantizer's form that the runtime refused in every segment holding it leaves its
    gene: the choices of that form are taken out of the table (and so, by
    operations/latency.leave_out, out of the gene), said in `left_out`."""
    for layer, sites in measurement.sites.items():
        tried = [key for (owner, key) in measurement.segments if owner == layer]
        for position, site in enumerate(sites):
            gene = measurement.site_genes.get(site)
            if gene is None:
                continue
            for form in set(measurement.genes[gene].values()):
                holding = [k for k in tried if k.split(" | ")[position] == form]
                if holding and not any((layer, k) in measured for k in holding):
                    dropped = [c for c, f in measurement.genes[gene].items() if f == form]
                    for choice in dropped:
                        del measurement.genes[gene][choice]
                    measurement.left_out.setdefault(gene, []).append(
                        f"{', '.join(dropped)}: the runtime cannot run {form}"
                    )


def measure_table(
    model: Any,
    example: torch.Tensor,
    genes: dict[str, list[Any]],
    make_runtime: Callable[[], Runtime],
    machine: dict[str, Any],
    workload: dict[str, Any],
    batch: int = 1,
    repeats: int = 15,
    seed: int = 0,
) -> LatencyTable:
    """The latency table of `model` (a calibrated QuantizedModel) whose genes take `genes`
    (gene -> its choices), in runtimes made by `make_runtime`, on inputs of `batch` samples."""
    measurement = Measurement()
    gene_forms(model, genes, measurement)
    example = example[:1].detach().to("cpu", torch.float32)
    with tempfile.TemporaryDirectory(prefix="model_explorer_latency_") as folder:
        export_plans(model.cpu().eval(), example, measurement, Path(folder), seed)
        keys, timings, integer = time_graphs(measurement, make_runtime, batch, repeats)
        refuse_forms(measurement, set(keys))
        in_graph = in_graph_times(
            measurement.wholes, measurement.whole_keys, measurement.owners, make_runtime, batch
        )
    calls = dict(
        zip(measurement.calls, timings[len(keys) + len(measurement.wholes) :], strict=True)
    )
    layers: dict[str, dict[str, Any]] = {
        layer: {
            "sites": sites,
            "times": {},
            "call_ms": calls[layer].median,
            "weights": model.layers[layer].weight.numel(),
        }
        for layer, sites in measurement.sites.items()
    }
    for (layer, key), timing, on_integers in zip(keys, timings[: len(keys)], integer, strict=True):
        layers[layer]["times"][key] = {**timing.to_dict(), "integer": on_integers}
        if (layer, key) in in_graph:
            layers[layer]["times"][key]["in_graph_ms"] = in_graph[(layer, key)]
    table = LatencyTable(
        machine,
        workload,
        measurement.genes,
        measurement.fixed,
        measurement.site_genes,
        layers,
        left_out=measurement.left_out,
    )
    wholes = timings[len(keys) : len(keys) + len(measurement.wholes)]
    table.wholes = [
        {
            "plan": plan,
            **timing.to_dict(),
            "segments_ms": table.segment_sum(plan),
            "features": table.features(plan),
        }
        for (plan, _), timing in zip(measurement.wholes, wholes, strict=True)
    ]
    table.fit = fit_correction(table.wholes)
    return table
