"""The workload's `problem:` settings (the original tool's section): which problem to explore
(`problem_function`), the original's run settings, and beside them the problem's own options
(problems/options.py), checked by the options model registered with the problem."""

from __future__ import annotations

from typing import ClassVar

from model_explorer.problems.registry import PROBLEMS
from model_explorer.schema.registry import Registry
from model_explorer.schema.specs import NonNegativeInt, TypedSpec


class ProblemSpec(TypedSpec):
    """`problem_function` names a registered problem; its options sit beside it, e.g.
    `{problem_function: quantization_problem, num_bits_lower_limit: 2, objectives: [accuracy,
    bops]}`."""

    registry: ClassVar[Registry] = PROBLEMS
    type_key: ClassVar[str] = "problem_function"

    problem_function: str = "quantization_problem"
    """The problem to explore: `quantization_problem`, `energy_aware_quant_problem`,
    `sparsity_problem` or `quantization_sparsity_problem` (`model-explorer list problems`); the
    keys beside it are that problem's own settings, checked by its options model."""
    gpu_id: NonNegativeInt | None = None
    """The CUDA device used where `device` is `auto` or `cuda` without an index; null: the
    first."""
    log_file: str | None = None
    """Accepted from workload files of the original layout and not used: log lines go to the
    terminal (`-v` for more)."""
    clear_log_file: bool = False
    """Accepted with `log_file` and not used either."""
    results_file: str | None = None
    """The result file `explore` writes (an existing one is an error unless `--resume`
    continues it); `--output` wins over it. Null: a new
    `results/expl_<problem>_<model>_<dataset>_<time>.pkl` each run."""
