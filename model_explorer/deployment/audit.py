"""The export-fidelity audit: per layer of an exported individual, the precision its plan asked
for beside the precision each runtime executed it in, as the runtime itself reports it
(`Runtime.kernels`: onnxruntime's optimised graph, OpenVINO's runtime model, TVM's imported
module), and a warning for every layer asked 8-bit integer inputs and weights that a runtime
with integer kernels ran in float.

Collect (`asked_precisions`, `file_facts`, `audit_export`), aggregate (`FidelityAudit`: the
rows and warnings, plain data in `to_dict`/`from_dict`); deployment/audit_render.py renders and
stores it. Nothing here imports torch, onnx or a runtime at import: report.md renders a stored
audit without them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model_explorer.formats import parse_format

FLOAT = "float"
# What is asked of a product that belongs to no layer of the model.
NOT_A_LAYER = "-"
# An ONNX product as the export writes it, named after its layer.
_PRODUCTS = ("Conv", "Gemm", "MatMul", "ConvTranspose")


@dataclass(frozen=True)
class Asked:
    """What the plan in effect asks of a layer: its input's and its weight's format by short
    name (`int8`, `mxfp4`), or "float" where no quantizer is enabled."""

    input: str
    weight: str

    @property
    def text(self) -> str:
        """`int8 x int8`, `int4 weights` (a float input), `int8 inputs`, `float`."""
        if self.input == self.weight and self.input in (FLOAT, NOT_A_LAYER):
            return self.input
        if self.input == FLOAT:
            return f"{self.weight} weights"
        if self.weight == FLOAT:
            return f"{self.input} inputs"
        return f"{self.input} x {self.weight}"

    @property
    def eight_bit_integer(self) -> bool:
        """Inputs and weights both in the 8-bit integer format: what runtimes with integer
        kernels run on them."""
        return all(_eight_bit_integer(name) for name in (self.input, self.weight))


def _eight_bit_integer(name: str) -> bool:
    if name in (FLOAT, NOT_A_LAYER):
        return False
    chosen = parse_format(name)
    return bool(chosen.classic and chosen.options.num_bits == 8)


def asked_precisions(model: Any) -> dict[str, Asked]:
    """Layer -> Asked of a QuantizedModel with the individual's plan in effect (its plan's
    settings; a layer the plan leaves out at the model's own; a disabled quantizer float)."""

    def name(quantizer: Any) -> str:
        return quantizer.format.spelling if quantizer.enabled else FLOAT

    return {
        layer: Asked(name(module.input_quantizer), name(module.weight_quantizer))
        for layer, module in model.layers.items()
    }


@dataclass(frozen=True)
class ProductFacts:
    """A layer's product as the exported file writes it: its operator, whether its input and
    weight come out of a DequantizeLinear, and whether a QuantizeLinear reads its output
    (through its bias addition)."""

    operator: str
    input_dequantized: bool
    weight_dequantized: bool
    output_quantized: bool


def file_facts(path: Path, layers: Iterable[str]) -> dict[str, ProductFacts]:
    """Layer -> ProductFacts of the ONNX file at `path` (the export names each product node
    after its layer)."""
    import onnx

    from model_explorer.deployment.graph import QDQGraph

    graph = onnx.load(str(path), load_external_data=False).graph
    producers = {output: node for node in graph.node for output in node.output}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    constants = {initializer.name for initializer in graph.initializer}
    constants |= {node.output[0] for node in graph.node if node.op_type == "Constant"}
    values = QDQGraph(graph)  # reads a constant operand as the export writes it

    def dequantized(name: str) -> bool:
        node = producers.get(name)
        while node is not None and node.op_type == "Pad" and _zero_padding(node, values):
            node = producers.get(node.input[0])  # runtimes fold a zero Pad into the product
        return node is not None and node.op_type == "DequantizeLinear"

    def quantized(name: str) -> bool:
        readers = consumers.get(name, [])
        if len(readers) == 1 and readers[0].op_type == "Add":  # its bias, a float Add
            other = [given for given in readers[0].input if given != name]
            if other and all(given in constants for given in other):
                return quantized(readers[0].output[0])
        return any(reader.op_type == "QuantizeLinear" for reader in readers)

    wanted = set(layers)
    return {
        node.name: ProductFacts(
            node.op_type,
            dequantized(node.input[0]),
            len(node.input) > 1 and dequantized(node.input[1]),
            quantized(node.output[0]),
        )
        for node in graph.node
        if node.name in wanted and node.op_type in _PRODUCTS
    }


def _zero_padding(node: Any, values: Any) -> bool:
    """A Pad of constant mode with the value 0 (TensorFlow's SAME padding as the exporter
    writes it), which onnxruntime's PadFusion folds into the convolution after it."""
    mode = next((a.s for a in node.attribute if a.name == "mode"), b"constant")
    name = node.input[2] if len(node.input) > 2 else ""
    if mode != b"constant":
        return False
    if not name:
        return True
    value = values.constant(name)  # a QDQGraph's reading
    return value is not None and not value.any()


@dataclass(frozen=True)
class Executed:
    """One kernel a runtime ran for a layer: its operator and precision as the runtime names
    them (`int8 QLinearConv`, `u8 Convolution`, `f32 Conv`)."""

    operator: str
    precision: str

    @property
    def integer(self) -> bool:
        return self.precision.startswith(("i", "u"))

    @property
    def text(self) -> str:
        return f"{self.precision} {self.operator}"


@dataclass(frozen=True)
class RuntimeRun:
    """A runtime at a setting as the audit names it: its label, version, and why it runs
    every product in float where it does (Runtime.float_only)."""

    label: str
    version: str = ""
    float_only: str = ""


@dataclass(frozen=True)
class FloatLayer:
    """A layer asked 8-bit integer inputs and weights that a runtime with integer kernels ran
    in float, and why where the file says it for certain."""

    layer: str
    runtime: str
    asked: str
    executed: str
    reason: str = ""

    @property
    def text(self) -> str:
        said = (
            f"warning: layer '{self.layer}' asked {self.asked} but {self.runtime} ran it in "
            f"float ({self.executed})"
        )
        return f"{said}: {self.reason}" if self.reason else said


@dataclass
class LayerRow:
    """One layer: what was asked, and per runtime label what it executed (no entry: the
    runtime reports no kernel for it)."""

    layer: str
    asked: Asked
    executed: dict[str, list[Executed]] = field(default_factory=dict)

    def cell(self, runtime: str) -> str:
        kernels = self.executed.get(runtime)
        return ", ".join(kernel.text for kernel in kernels) if kernels else "not found"


@dataclass
class FidelityAudit:
    """Every layer of an exported individual with its asked and executed precisions, the
    runtimes that ran it, and the layers that silently ran in float."""

    runtimes: list[RuntimeRun]
    rows: list[LayerRow]
    warnings: list[FloatLayer] = field(default_factory=list)

    @classmethod
    def collect(
        cls,
        asked: Mapping[str, Asked],
        facts: Mapping[str, ProductFacts],
        runs: Mapping[RuntimeRun, list[Any]],
        quantized_output_for: Mapping[str, tuple[str, ...]] | None = None,
    ) -> FidelityAudit:
        """The audit of one file: `asked` per layer (asked_precisions), the file's `facts`
        (file_facts), each runtime's kernels (`Kernel`s, as Runtime.kernels lists them) and,
        per runtime label, the operators its integer kernels need a quantized output for."""
        from model_explorer.deployment.runtimes import layer_of

        rows = {layer: LayerRow(layer, wanted) for layer, wanted in asked.items()}
        for run, kernels in runs.items():
            for kernel in kernels:
                layer = layer_of(kernel.node, asked)
                row = rows.setdefault(layer, LayerRow(layer, Asked(NOT_A_LAYER, NOT_A_LAYER)))
                row.executed.setdefault(run.label, []).append(
                    Executed(kernel.operator, kernel.precision)
                )
        audit = cls(list(runs), list(rows.values()))
        audit.warnings = audit._float_layers(facts, quantized_output_for or {})
        return audit

    def _float_layers(
        self, facts: Mapping[str, ProductFacts], needs_output: Mapping[str, tuple[str, ...]]
    ) -> list[FloatLayer]:
        found = []
        for row in self.rows:
            if not row.asked.eight_bit_integer:
                continue
            for run in self.runtimes:
                kernels = row.executed.get(run.label, [])
                if run.float_only or not kernels or any(k.integer for k in kernels):
                    continue
                reason = _reason(facts.get(row.layer), run, needs_output.get(run.label, ()))
                found.append(
                    FloatLayer(row.layer, run.label, row.asked.text, row.cell(run.label), reason)
                )
        return found

    def to_dict(self) -> dict[str, Any]:
        return {
            "runtimes": [vars(run) for run in self.runtimes],
            "layers": [
                {
                    "layer": row.layer,
                    "asked": vars(row.asked),
                    "executed": {
                        label: [vars(kernel) for kernel in kernels]
                        for label, kernels in row.executed.items()
                    },
                }
                for row in self.rows
            ],
            "warnings": [vars(warning) for warning in self.warnings],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FidelityAudit:
        rows = [
            LayerRow(
                row["layer"],
                Asked(**row["asked"]),
                {
                    label: [Executed(**kernel) for kernel in kernels]
                    for label, kernels in row["executed"].items()
                },
            )
            for row in data["layers"]
        ]
        runtimes = [RuntimeRun(**run) for run in data["runtimes"]]
        return cls(runtimes, rows, [FloatLayer(**warning) for warning in data["warnings"]])


def _reason(facts: ProductFacts | None, run: RuntimeRun, needs_output: tuple[str, ...]) -> str:
    """Why a runtime could not run the layer on integers, where the file makes it certain: an
    operand the file does not dequantize (no runtime fuses it), or an output the file does not
    quantize for a runtime whose integer kernel of that operator needs one."""
    if facts is None:
        return ""
    missing = [
        operand
        for operand, dequantized in (
            ("input", facts.input_dequantized),
            ("weight", facts.weight_dequantized),
        )
        if not dequantized
    ]
    if missing:
        return f"the file has no DequantizeLinear before its {' and '.join(missing)}"
    if facts.operator in needs_output and not facts.output_quantized:
        return (
            f"its output is not quantized in the file, and {run.label} fuses a {facts.operator} "
            "into an integer kernel only with a QuantizeLinear after it"
        )
    return ""


def audit_export(
    model: Any, path: Path, runs: Iterable[tuple[str, str, list[Any]]]
) -> FidelityAudit:
    """The audit of the file at `path`, exported from `model` (a QuantizedModel with the
    individual's plan in effect), from what each runtime ran it with: (label as on the
    command line, version, its `kernels()`) per runtime."""
    from model_explorer.deployment.runtimes import runtime_setting

    asked = asked_precisions(model)
    collected: dict[RuntimeRun, list[Any]] = {}
    needs: dict[str, tuple[str, ...]] = {}
    for label, version, kernels in runs:
        runtime, _ = runtime_setting(label)
        collected[RuntimeRun(label, version, runtime.float_only)] = kernels
        needs[label] = runtime.quantized_output_for
    return FidelityAudit.collect(asked, file_facts(path, asked), collected, needs)
