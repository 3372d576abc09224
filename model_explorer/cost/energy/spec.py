"""The workload's `energy_evaluation:` section and the registry of energy backends, declared
here with each shipped backend's options so that reading a workload imports no backend (nor
torch); a backend's module is imported when it first runs (analytic.py, zigzag.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from model_explorer.schema.registry import Registry
from model_explorer.schema.specs import PositiveFloat, PositiveInt, Spec, TypedSpec

EnergyBackend = Callable[..., list[Any]]  # (model, example, options, layers) -> [LayerEnergy]
ENERGY_BACKENDS: Registry[EnergyBackend] = Registry("energy backend")


def register_energy_backend(name: str, options: Any) -> Callable[[EnergyBackend], EnergyBackend]:
    """Register `backend(model, example, options=None, layers=None) -> list[LayerEnergy]` with
    the pydantic model of its options (keys of `energy_evaluation` beside `backend`)."""
    return ENERGY_BACKENDS.register(name, options=options)


class Accelerator(Spec):
    """The analytic backend's options, its accelerator: global buffer, DRAM word, energy per
    DRAM access."""

    global_buffer_kib: PositiveFloat = 108.0  # Eyeriss' global buffer
    """The global buffer in KiB; half of it holds weights, so a layer whose weights do not fit
    is read in tiles of output channels and its input streamed from DRAM once per tile."""
    word_bits: PositiveInt = 16
    """The bits one DRAM access moves: the precision the counts assume (the table's
    `bitwidth`), from which the `energy` objective scales them to each layer's bit widths."""
    dram_pj_per_word: PositiveFloat = 200.0  # about 200 times a 16-bit MAC (Eyeriss' ratios)
    """The energy of one DRAM access (one word), in pJ."""


class ZigZagOptions(Spec):
    """The zigzag backend's options: a hardware description shipped with ZigZag."""

    hardware: str = "eyeriss_like"
    """The hardware description shipped with the `zigzag` extra, by name (`eyeriss_like`,
    `tpu_like`, `edge_tpu_like`, ...), with its own mapping where one ships; an unknown name
    is an error listing the known ones."""


ENERGY_BACKENDS.declare(
    "analytic", "model_explorer.cost.energy.analytic:analytic_energy", options=Accelerator
)
ENERGY_BACKENDS.declare(
    "zigzag", "model_explorer.cost.energy.zigzag:zigzag_energy", options=ZigZagOptions
)


class EnergyEvaluationSpec(TypedSpec):
    """Per-layer DRAM accesses: read from `dram_analysis_file` (written by `energy-analysis`),
    else computed by `backend` when a problem needs them; the backend's options sit beside."""

    registry: ClassVar[Registry[Any]] = ENERGY_BACKENDS
    type_key: ClassVar[str] = "backend"
    backend: str = "analytic"
    """What counts the DRAM accesses: `analytic` (no extra dependency) or `zigzag` (the `zigzag`
    extra); the keys beside it are that backend's own options (`model-explorer list energy`)."""
    dram_analysis_file: str | None = None
    """The per-layer DRAM table (CSV) that `energy-analysis` writes and the `energy` objective
    reads; a search refuses to start while it is missing. Null: `energy-analysis` writes
    `results/<name>_dram_accesses.csv` and a search counts the accesses itself when it starts."""
    input_shape: list[PositiveInt] | None = None
    """The input [N, C, H, W] the accesses are counted for; null: one sample shaped like the
    exploration data. The model runs on it once, and a shape it cannot take is an error that
    names a shape that fits."""
