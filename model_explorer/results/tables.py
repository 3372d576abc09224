"""A result's individuals as pandas tables: per variable over some individuals
(`ExplorationResult.layer_statistics`), one row per individual (`.to_dataframe`)."""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from model_explorer.plan import THRESHOLD, variable_setting


def layer_statistics(result: Any, individuals: list[Any] | None = None):  # noqa: ANN201
    """Per variable (quantizer or layer threshold) over `individuals` (default: the Pareto
    front): mean, median (the lower middle value: one a member has), min and max of the
    configuration that ran (for a gene choosing formats:
    of their bits per element, scales counted, with the most frequent format beside them).
    Quantizer names are split into layer and kind (input / weight) so that input and
    weight bits sit side by side."""
    import pandas as pd

    chosen = individuals if individuals is not None else result.pareto_front()
    rows = []
    for index, name in enumerate(result.variable_names):
        settings = [i.configuration[index] for i in chosen]
        values = [_gene_value(value) for value in settings]
        layer, setting = variable_setting(name)
        kind = "threshold" if setting == THRESHOLD else setting.split("_")[0]
        row = {
            "variable": name,
            "layer": layer,
            "kind": kind,
            "mean": float(np.mean(values)) if values else float("nan"),
            "median": statistics.median_low(values) if values else float("nan"),
            "min": min(values) if values else float("nan"),
            "max": max(values) if values else float("nan"),
        }
        if any(isinstance(value, str) for value in settings):
            row["format"] = max(set(settings), key=settings.count)
        rows.append(row)
    return pd.DataFrame(rows)


def individuals_table(result: Any):  # noqa: ANN201 - pandas is imported here, not at import
    """One row per individual: id, generation, feasibility, every value (objectives,
    accuracies, costs) and one column per variable with the configuration that ran."""
    import pandas as pd

    rows = []
    names = result.variable_names
    for record in result.records:
        row = {
            "id": record["id"],
            "generation": record["generation"],
            "feasible": record["feasible"],
            "complete": record["complete"],
            "seconds": record["seconds"],
            **record["values"],
            **dict(zip(names, record["configuration"], strict=True)),
        }
        rows.append(row)
    return pd.DataFrame(rows)


def _gene_value(value: Any) -> float:
    """A gene's setting as a number: a bit width or threshold as it is, a format by its bits
    per element (the format registry imports no torch)."""
    if isinstance(value, str):
        from model_explorer.formats import format_bits

        return format_bits(value)
    return float(value)
