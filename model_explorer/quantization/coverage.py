"""How much of a model's weight arithmetic a QuantizedModel runs on quantized weights, and
which layers holding weights it leaves in float.

Found by what runs, not by module types: one traced forward pass (the tracer the cost table
uses; cost/weights.py) counts the multiply-accumulates of each product (convolution, matmul,
linear: torch's FLOP formulas / 2) that reads a parameter of two or more dimensions, or a
tensor standing for one (a view, a standardised weight, a weight quantizer's output), by the
module owning the parameter, and which of them read a weight a quantizer changed. A layer the
swap did not find, whatever its type, shows up as float MACs under its name. Weights that no
product reads (an embedding's lookup table, a positional parameter added to activations) are no
MACs: they are named apart, with their share of the model's weight elements (`unread`).
`Coverage` is plain data (a result file's `problem.coverage`); torch is imported only to
measure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class FloatLayer:
    """A module whose weight products run in float: its name, type, MACs and their share."""

    name: str
    type: str
    macs: int
    share: float


@dataclass
class UnreadWeights:
    """A module whose weights no product reads (an embedding's lookup table, a positional
    parameter added to activations): in float whatever the plan. `share` is of the model's
    weight elements (parameters of two or more dimensions)."""

    name: str
    type: str
    elements: int
    share: float


@dataclass
class Coverage:
    """`quantized_macs` of `total_macs` weight MACs run on quantized weights; `float_layers`
    are the modules whose weights do not, largest first; `unread` the modules whose weights no
    product reads, largest first."""

    total_macs: int
    quantized_macs: int
    float_layers: list[FloatLayer] = field(default_factory=list)
    unread: list[UnreadWeights] = field(default_factory=list)

    @property
    def share(self) -> float:
        return self.quantized_macs / self.total_macs if self.total_macs else 1.0

    @property
    def headline(self) -> str:
        return f"{self.share:.1%} of the weight MACs run on quantized weights"

    def statement(self, limit: int = 5) -> str:
        """One line: the share, the largest float layers and the largest weights that no
        product reads."""
        said = self.headline
        if self.float_layers:
            said += f"; in float: {_named(self.float_layers, limit)}"
        if self.unread:
            unread = _named(self.unread, limit, " of the weights")
            said += f"; weights no product reads, in float: {unread}"
        return said

    def warned(self, threshold: float, excluded: Callable[[str, str], bool]) -> list[FloatLayer]:
        """The float layers above `threshold` of the MACs that the workload did not exclude
        (`excluded(name, type)`)."""
        return [
            layer
            for layer in self.float_layers
            if layer.share > threshold and not excluded(layer.name, layer.type)
        ]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Coverage:
        layers = [FloatLayer(**layer) for layer in data["float_layers"]]
        unread = [UnreadWeights(**module) for module in data.get("unread", [])]  # older files
        return cls(data["total_macs"], data["quantized_macs"], layers, unread)

    def to_dict(self) -> dict[str, Any]:
        return {
            "total_macs": self.total_macs,
            "quantized_macs": self.quantized_macs,
            "share": self.share,
            "float_layers": [asdict(layer) for layer in self.float_layers],
            "unread": [asdict(module) for module in self.unread],
        }


def _named(modules: Sequence[Any], limit: int, of: str = "") -> str:
    named = [f"{m.name or '<the model>'} ({m.type}, {m.share:.1%}{of})" for m in modules]
    more = len(named) - limit
    return ", ".join(named[:limit]) + (f" and {more} more" if more > 0 else "")


def plan_coverage(rows: Sequence[Any], plan: dict[str, Any]) -> Coverage:
    """The coverage a plan gives a float model's cost table (cost/analyze.py rows): the weight
    MACs (rows with parameters and MACs) of the layers the plan sets, against all of them; the
    other modules with weight MACs are the float layers."""
    by_module: dict[str, list[Any]] = {}
    for row in rows:
        if row.params and row.macs:
            by_module.setdefault(row.name, []).append(row)
    macs = {name: sum(row.macs for row in found) for name, found in by_module.items()}
    total = sum(macs.values())
    float_layers = sorted(
        (
            FloatLayer(name, by_module[name][0].module_type, value, value / total)
            for name, value in macs.items()
            if name not in plan
        ),
        key=lambda layer: -layer.macs,
    )
    return Coverage(total, total - sum(layer.macs for layer in float_layers), float_layers)


def weight_coverage(model: Any, run: Callable[[], Any]) -> Coverage:
    """The coverage of `model` (a QuantizedModel) on the forward pass `run()` makes, counted
    by the tracer (cost/weights.py) with the quantizers as they are."""
    from model_explorer.cost.weights import float_recurrent, weight_macs

    network = model.model
    owners, types, elements = {}, {}, {}
    for name, module in network.named_modules():
        if float_recurrent(module):  # counted by its formula: its ops may be one kernel
            types[name] = type(module).__name__
            continue
        for parameter in module.parameters(recurse=False):
            if parameter.dim() >= 2:
                owners[id(parameter)] = name
                elements[name] = elements.get(name, 0) + parameter.numel()
                own = getattr(module, "own_type", None) or getattr(module, "float_type", None)
                types[name] = (own or type(module)).__name__
    counted = weight_macs(model, owners, run)
    total = counted.macs
    left = {name: macs - counted.quantized_macs.get(name, 0) for name, macs in total.items()}
    total_macs = sum(total.values())
    all_elements = sum(elements.values())
    unread = sorted(
        (
            UnreadWeights(name, types[name], elements[name], elements[name] / all_elements)
            for name in counted.unread - set(total)
        ),
        key=lambda module: -module.elements,
    )
    float_layers = sorted(
        (
            FloatLayer(name, types[name], macs, macs / total_macs if total_macs else 0.0)
            for name, macs in left.items()
            if macs
        ),
        key=lambda layer: -layer.macs,
    )
    return Coverage(total_macs, total_macs - sum(left.values()), float_layers, unread)
