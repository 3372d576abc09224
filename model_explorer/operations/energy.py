"""Energy analysis of a workload's model: the CSV of per-layer DRAM accesses and EnergyModels."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from model_explorer.cost.energy.base import (
    CSV_COLUMNS,
    LayerEnergy,
    energy_layers,
    rows_from_records,
)
from model_explorer.cost.energy.model import EnergyModel
from model_explorer.cost.energy.spec import ENERGY_BACKENDS, EnergyEvaluationSpec
from model_explorer.cost.graph import layer_producers
from model_explorer.errors import UserError
from model_explorer.fileio import atomic_path
from model_explorer.input_shapes import run_on_shape
from model_explorer.quantization.attention import open_attention
from model_explorer.schema.paths import resolve_path

if TYPE_CHECKING:
    from model_explorer.workload.context import WorkloadContext


def energy_spec(context: WorkloadContext) -> EnergyEvaluationSpec:
    return context.workload.energy_evaluation or EnergyEvaluationSpec()


def example_input(context: WorkloadContext, model: torch.nn.Module) -> torch.Tensor:
    """`energy_evaluation.input_shape` (checked by running `model` on it once), else one sample
    shaped like the exploration data."""
    shape = energy_spec(context).input_shape
    if shape is not None:
        key = context.workload.key("energy_evaluation.input_shape")
        return run_on_shape(model, shape, key, context.device)
    if shape is None:
        if not context.has_dataset("exploration"):
            raise UserError(
                f"{context.workload.key('energy_evaluation.input_shape')}: give the input shape "
                "[N, C, H, W]"
            )
        shape = [1, *next(iter(context.batches("exploration")))[0].shape[1:]]
    return torch.zeros(*shape, device=context.device)


def analyze_energy(context: WorkloadContext, backend: str | None = None) -> list[LayerEnergy]:
    """Per-layer DRAM accesses and energy of the workload's float model, by the workload's
    backend with its options, or by `backend` (with that backend's default options unless it
    is the workload's)."""
    spec = energy_spec(context)
    name = backend or spec.backend
    entry = ENERGY_BACKENDS.get(name, "--backend")
    options = spec.options if name == spec.backend else entry.options()
    model = float_model(context)
    return entry.builder(model, example_input(context, model), options)


def write_energy_csv(rows: list[LayerEnergy], path: str | Path) -> Path:
    path = Path(path)
    with atomic_path(path) as temporary, open(temporary, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow(row.as_row())
    return path


def read_energy_csv(path: str | Path, where: str = "dram_analysis_file") -> list[LayerEnergy]:
    path = resolve_path(path)
    if not path.is_file():
        raise UserError(
            f"{where}: '{path}' does not exist; write it with "
            "`model-explorer energy-analysis WORKLOAD`"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{where}: '{path}' is not a CSV text file (not UTF-8)") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = reader.fieldnames or []
    missing = [c for c in CSV_COLUMNS if c != "layer_name" and c not in header]
    if missing:
        shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
        raise UserError(
            f"{where}: '{path}' is not a CSV of DRAM accesses: it lacks {len(missing)} of its "
            f"columns ({shown}); write it with `model-explorer energy-analysis WORKLOAD`"
        )
    records = list(reader)
    if not records:
        raise UserError(f"{where}: '{path}' holds no rows; write it with `energy-analysis`")
    try:
        return rows_from_records(records)
    except (TypeError, ValueError) as error:
        raise UserError(f"{where}: '{path}' holds a value that is not a number ({error})") from None


def build_energy_model(context: WorkloadContext, layers: list[str]) -> EnergyModel:
    """The EnergyModel of the workload's quantized layers: rows from `dram_analysis_file` when
    the workload names one, else computed now by the configured backend."""
    spec = energy_spec(context)
    if spec.dram_analysis_file is not None:
        where = context.workload.key("energy_evaluation.dram_analysis_file")
        rows = read_energy_csv(spec.resolve(spec.dram_analysis_file), where)
        source = spec.dram_analysis_file
    else:
        rows = analyze_energy(context)
        source = f"the {spec.backend} energy analysis"
    model = float_model(context)
    chosen = energy_layers(model, layers)  # weight layers: products of activations have none
    producers = layer_producers(model, example_input(context, model), chosen)
    return EnergyModel(rows, list(chosen), producers, source)


def float_model(context: WorkloadContext) -> torch.nn.Module:
    """The workload's float model with its attention opened: rows are named after the layers
    a QuantizedModel explores (`<attention>.in_proj`, ...)."""
    model = context.build_model(load_weights=False)
    open_attention(model)
    return model


def default_csv_path(context: WorkloadContext) -> Path:
    spec = energy_spec(context)
    if spec.dram_analysis_file is not None:
        return spec.resolve(spec.dram_analysis_file)
    return context.workload.results_folder / f"{context.workload.name}_dram_accesses.csv"
