"""Inspectors of what quantization buys and costs: size and BOPs (Compression), accuracy per
quantizer (Sensitivity)."""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Any

from model_explorer.analysis.diagnose.base import (
    MEDIUM,
    BaseInspector,
    DiagnosisContext,
    Finding,
    register_inspector,
)
from model_explorer.cost.bits import BitCostModel, element_bits
from model_explorer.figures import pyplot, save_figure
from model_explorer.plan import WEIGHT_BITS, current_plan
from model_explorer.quantization.sensitivity import SensitivityTable, layer_sensitivity


@register_inspector
class Coverage(BaseInspector):
    """The share of the model's weight MACs that run on quantized weights, and every layer
    holding weights that does not, by name and type (quantization/coverage.py: found by what
    runs, whatever a layer's type). A float layer above `quantization.coverage_warning` of the
    MACs that the workload did not leave out is a warning, saying how to quantize it or leave
    it out by name; otherwise info."""

    name = "Coverage"
    priority = MEDIUM

    def run(self, context: DiagnosisContext) -> list[Finding]:
        from model_explorer.operations.pipeline import measure_coverage

        spec = context.workload.quantization
        example = context.inputs[0].to(context.device)
        coverage, warned = measure_coverage(context.quantized_model, example, spec)
        evidence = coverage.to_dict()
        if not warned:
            return [self.finding("info", coverage.statement(), evidence=evidence)]
        names = [layer.name for layer in warned]
        return [
            self.finding(
                "warning",
                f"{coverage.statement()}. {', '.join(names)} hold more than "
                f"{spec.coverage_warning:.0%} of the MACs each and run in float, which the "
                "workload did not ask for: add their type to quantization.layer_types, or "
                "name them in quantization.exclude if they are to stay float",
                evidence=evidence,
            )
        ]


@register_inspector
class Compression(BaseInspector):
    """Info: the weights' size at the workload's configured bit widths against float32 (layers
    left in float and other parameters counted at 32 bits), the compression ratio, the average
    weight bits, and the BOPs against 32 x 32-bit MACs. As Hailo's: the share of weights at 4
    bits or fewer (info), and implicit compression: a search that may put weights at 4 bits or
    fewer only because `num_bits_lower_limit` was left at its default is a warning (set it
    to 5 if that is not meant); with the limit in the file, info."""

    name = "Compression"
    priority = MEDIUM

    def run(self, context: DiagnosisContext) -> list[Finding]:
        model = context.quantized_model
        example = context.inputs[0][:1].to(context.device)
        costs = BitCostModel.measure(model, example, model.layers)
        plan = current_plan(model)
        total = sum(p.numel() for p in model.model.parameters())
        quantized_elements = costs.weight_elements
        weight_bits = costs.model_size(plan)
        size = weight_bits + 32 * (total - quantized_elements)
        bops = costs.bops(plan)
        float_bops = 32 * 32 * costs.macs
        evidence = {
            "float_bytes": 4 * total,
            "quantized_bytes": size / 8,
            "ratio": round(32 * total / size, 3),
            "average_weight_bits": round(weight_bits / max(quantized_elements, 1), 3),
            "bops": bops,
            "float_bops": float_bops,
        }
        return [
            *self._four_bit(context, model, costs, plan),
            self.finding(
                "info",
                f"{evidence['quantized_bytes'] / 1024:.1f} KiB of parameters against "
                f"{evidence['float_bytes'] / 1024:.1f} KiB in float ({evidence['ratio']:.2f}x "
                f"smaller, {evidence['average_weight_bits']:.2f} bits per quantized weight); "
                f"BOPs {bops / float_bops:.1%} of float",
                evidence=evidence,
            ),
        ]

    def _four_bit(self, context: DiagnosisContext, model: Any, costs: Any, plan: Any) -> list:
        """Hailo's compression checks: the share of weights at 4 bits or fewer as configured
        (info), and the share the search may put there: a warning when that comes from the
        default `num_bits_lower_limit` (implicit compression), recommending 5; info when the
        file chose the limit."""
        counts = {name: cost.weight_elements for name, cost in costs.layers.items()}
        total = sum(counts.values()) or 1
        found = []
        bits = {name: element_bits(plan[name], WEIGHT_BITS) or 32 for name in counts}
        low = sum(n for name, n in counts.items() if bits[name] <= 4)
        if low:
            found.append(
                self.finding(
                    "info",
                    f"{low / total:.2%} of the quantized weights are at 4 bits or fewer",
                    evidence={"four_bit_share": round(low / total, 6)},
                )
            )
        options = context.workload.problem.options
        if context.workload.exploration is None or not hasattr(options, "num_bits_lower_limit"):
            return found
        names = {f"{layer}.weight_quantizer": n for layer, n in counts.items()}
        reach = sum(n for name, n in names.items() if _lowest_bits(options, name) <= 4)
        if not reach:
            return found
        explicit = "num_bits_lower_limit" in options.model_fields_set
        share = f"the search may put {reach / total:.0%} of the weights at 4 bits or fewer"
        evidence = {"searchable_four_bit_share": round(reach / total, 6)}
        if explicit:
            limit = options.num_bits_lower_limit
            found.append(self.finding("info", f"{share} (num_bits_lower_limit: {limit})"))
            found[-1].evidence = evidence
            return found
        found.append(
            self.finding(
                "warning",
                f"implicit compression: {share}, by the default num_bits_lower_limit "
                f"({options.num_bits_lower_limit}); if that is not meant, set "
                "problem.num_bits_lower_limit: 5",
                evidence=evidence,
                recommendation={"problem": {"num_bits_lower_limit": 5}},
            )
        )
        return found


def _lowest_bits(options: Any, name: str) -> int:
    """The lowest bit width the search may give quantizer `name` (layer_bounds' bit pairs
    applied, later patterns winning)."""
    low = options.num_bits_lower_limit
    for pattern, bounds in options.layer_bounds.items():
        if fnmatch.fnmatchcase(name, pattern) and all(isinstance(b, int) for b in bounds):
            low = bounds[0]
    return low


@register_inspector
class Sensitivity(BaseInspector):
    """One quantizer at a time at the lowest explored bit width, every other one in float:
    the accuracy drop on the exploration data (AIMET's per-layer analysis). Writes
    sensitivity.csv and sensitivity.png, ranked. A drop above 5 points is a warning, with the
    smallest bit width whose drop is at most 1 point (searched upwards) recommended as that
    quantizer's lower bound. For a metric where lower is better (kl) the drop is what it
    gains over the float model, with the same bounds in its units (0.05 and 0.01 nats)."""

    name = "Sensitivity"
    warning_drop, target_drop = 0.05, 0.01

    def run(self, context: DiagnosisContext) -> list[Finding]:
        if not context.has_exploration_data():
            return [
                self.finding(
                    "info", "no exploration data in the workload: sensitivity not measured"
                )
            ]
        low, high = context.bit_range
        table = layer_sensitivity(
            context.quantized_model,
            context.context.batches("exploration"),
            context.workload.metric,
            low,
        )
        context.cache["sensitivity"] = table
        spec = context.workload.metric
        metric = spec if isinstance(spec, str) else spec.type
        table.to_csv(context.out_dir / "sensitivity.csv")
        plot_sensitivity(table, context.out_dir / "sensitivity.png", metric)
        findings = []
        for rank, row in enumerate(table.ranked(), 1):
            if row.drop <= self.warning_drop:
                continue
            bits = table.bits_within(
                context.quantized_model,
                context.context.batches("exploration"),
                context.workload.metric,
                row.name,
                self.target_drop,
                (low + 1, high),
            )
            findings.append(
                self.finding(
                    "warning",
                    f"alone at {low} bits it {_damage(table, row.drop, metric)} (rank {rank} of "
                    f"{len(table.rows)}); {bits} bits keep that within "
                    f"{_amount(table, self.target_drop, metric)}",
                    layer=row.name,
                    evidence={"drop": round(row.drop, 4), "rank": rank, "bits": bits},
                    recommendation={"problem": {"layer_bounds": {row.name: [bits, high]}}},
                )
            )
        top = table.ranked()[0]
        findings.append(
            self.finding(
                "info",
                f"float {metric} {table.baseline:.4f}; most sensitive at {low} bits: {top.name} "
                f"({_damage(table, top.drop, metric)}); table in sensitivity.csv, plot in "
                "sensitivity.png",
                evidence={"baseline": table.baseline, "drops": table.drops()},
            )
        )
        return findings


def _damage(table: SensitivityTable, drop: float, metric: str) -> str:
    """A drop in words: points of accuracy, or what a lower-is-better metric (kl) gains."""
    if table.higher:
        return f"costs {_amount(table, drop, metric)}"
    return f"raises {metric} by {drop:.4f}"


def _amount(table: SensitivityTable, drop: float, metric: str) -> str:
    if not table.higher:
        return f"{drop:g} of {metric}"
    return f"{drop * 100:.1f} points of {metric}".replace(".0 points", " points")


def plot_sensitivity(table: SensitivityTable, path: str | Path, metric: str = "accuracy") -> None:
    """Accuracy drop per quantizer (or what a lower-is-better `metric` gains), most sensitive
    first."""
    plt = pyplot()
    rows = table.ranked()
    figure, axes = plt.subplots(figsize=(max(6, 0.35 * len(rows) + 2), 4))
    scale = 100 if table.higher else 1
    axes.bar(range(len(rows)), [scale * row.drop for row in rows], color="tab:red")
    axes.set_xticks(range(len(rows)), [row.name for row in rows], rotation=75, fontsize=7)
    axes.set_ylabel("accuracy drop (points)" if table.higher else f"{metric} over the float model")
    axes.set_title(f"one quantizer at {table.bits} bits, all others float")
    figure.tight_layout()
    save_figure(figure, path, dpi=120, close=True)
