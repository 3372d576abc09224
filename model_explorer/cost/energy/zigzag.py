"""The `zigzag` energy backend: KU Leuven's ZigZag cost model on an ONNX export of the model.

ZigZag (the `zigzag` extra: zigzag-dse, six, onnx) reads the ONNX graph, maps every convolution
and matrix layer onto a shipped hardware description (default `eyeriss_like`) and reports word
accesses and energy per memory level. This backend keeps the DRAM level (the last one): reads
(`rd_out_to_low` + `rd_out_to_high`), updates (`wr_in_by_low`) and fills (`wr_in_by_high`).
One run takes seconds for small models and about a minute for a ResNet-18: run it once per
model (`energy_analysis`) and let problems scale its CSV by bit width.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from model_explorer.cost.energy.base import LayerEnergy, energy_layers
from model_explorer.cost.energy.spec import ZigZagOptions
from model_explorer.cost.layers import measure_layers
from model_explorer.errors import UserError
from model_explorer.tracing.onnx_export import export_onnx

log = logging.getLogger(__name__)


def _zigzag_inputs(hardware: str) -> tuple[str, str]:
    try:
        import zigzag
    except ImportError:
        raise UserError(
            "energy backend 'zigzag' needs the zigzag extra: pip install 'model_explorer[zigzag]'"
        ) from None
    base = Path(zigzag.__file__).parent / "inputs"
    accelerator = base / "hardware" / f"{hardware}.yaml"
    if not accelerator.is_file():
        known = sorted(p.stem for p in (base / "hardware").glob("*.yaml"))
        raise UserError(
            f"energy_evaluation.hardware: ZigZag has no '{hardware}'; known: {', '.join(known)}"
        )
    mapping = base / "mapping" / f"{hardware}.yaml"
    return str(accelerator), str(
        mapping if mapping.is_file() else base / "mapping" / "default.yaml"
    )


def _export(model: nn.Module, example: torch.Tensor, path: Path) -> Path:
    import onnx
    from onnx import shape_inference

    # ZigZag's parser needs the inferred shapes.
    export_onnx(model, example, path)
    onnx.save(shape_inference.infer_shapes(onnx.load(str(path))), str(path))
    return path


def zigzag_energy(
    model: nn.Module,
    example: torch.Tensor,
    options: ZigZagOptions | None = None,
    layers: list[str] | None = None,
) -> list[LayerEnergy]:
    """DRAM accesses and energy of every convolution/linear layer, from one ZigZag run."""
    accelerator, mapping = _zigzag_inputs((options or ZigZagOptions()).hardware)
    chosen = energy_layers(model, layers)
    # ZigZag reports the layers in graph order, which is the order they run in.
    order = list(measure_layers(model, example, chosen))
    evaluations = _run_zigzag(model, example, accelerator, mapping)
    if len(evaluations) != len(order):
        raise UserError(
            f"zigzag reported {len(evaluations)} layers for {len(order)} convolution/linear "
            "layers; use the analytic backend for this model"
        )
    return [
        _row(index, name, chosen[name], evaluation)
        for index, (name, evaluation) in enumerate(zip(order, evaluations, strict=True))
    ]


def _run_zigzag(model: nn.Module, example: torch.Tensor, accelerator: str, mapping: str) -> list:
    """ZigZag's per-layer evaluations of the model exported to ONNX, its logging quietened."""
    from zigzag.api import get_hardware_performance_zigzag

    with tempfile.TemporaryDirectory() as folder:
        onnx_path = _export(model, example, Path(folder) / "model.onnx")
        quiet = logging.getLogger("zigzag").level
        logging.getLogger("zigzag").setLevel(logging.ERROR)
        try:
            _, _, results = get_hardware_performance_zigzag(
                str(onnx_path),
                accelerator,
                mapping,
                opt="energy",
                dump_folder=os.path.join(folder, "out"),
                loma_show_progress_bar=False,
            )
        finally:
            logging.getLogger("zigzag").setLevel(quiet)
    evaluations = results[0][1] if results and isinstance(results[0], tuple) else results
    return [e[0] if isinstance(e, tuple) else e for e in evaluations]


def _row(index: int, name: str, module: nn.Module, evaluation: Any) -> LayerEnergy:
    """The DRAM level (the last memory level) of one layer's ZigZag evaluation."""
    counts = {}
    energy = {}
    for kind, operand in (("w", "W"), ("i", "I"), ("o", "O")):
        found = next(op for op in evaluation.memory_word_access if str(op) == operand)
        top = evaluation.memory_word_access[found][-1].__jsonrepr__()
        counts[f"{kind}_reads"] = float(top["rd_out_to_low"] + top["rd_out_to_high"])
        counts[f"{kind}_updates"] = float(top["wr_in_by_low"])
        counts[f"{kind}_fills"] = float(top["wr_in_by_high"])
        energy[kind] = float(evaluation.mem_energy_breakdown[found][-1])
    precision = {str(k): v for k, v in evaluation.layer.operand_precision.data.items()}
    return LayerEnergy(
        layer_idx=index,
        layer_type=getattr(module, "float_type", type(module)).__name__,
        **counts,
        w_energy=energy["w"],
        i_energy=energy["i"],
        o_energy=energy["o"],
        total_dram_energy=sum(energy.values()),
        bitwidth=int(precision.get("I", 8)),
        layer_name=name,
    )
