"""The search: NSGA-II over a Problem, every evaluation recorded, resumable.

Importing the package does no work (the workload schema imports its settings from here, and
pymoo is imported only when a search is made): the names below load their modules on first use.
`explore()`, which runs a workload's search, is operations/explore.py.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "explorer": ["Explorer", "make_algorithm"],
        "runners": ["Runner", "SerialRunner", "ProcessRunner", "build_runner"],
    },
)
