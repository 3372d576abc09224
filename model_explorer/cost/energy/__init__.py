"""Per-layer DRAM energy: the workload's section and the backends' registry (spec.py, no torch),
the backends (analytic.py, zigzag.py, imported when they first run), their rows and CSV
(base.py) and the energy of a bit-width configuration (model.py)."""
