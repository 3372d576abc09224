"""model_explorer: how far can a trained PyTorch network be compressed, layer by layer?

Importing the package does no work: the names below load their modules on first use.
"""

import lazy_loader

__version__ = "0.1.0"

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "errors": ["UserError"],
        "workload.file": ["Workload", "load_workload"],
        "workload.context": ["WorkloadContext"],
        "models.checkpoints": ["build_model"],
        "models.registry": ["create_model"],
        "models.spec": ["register_model"],
        "datasets.base": ["build_dataset", "build_loader"],
        "datasets.spec": ["register_dataset"],
        "datasets.cache": ["TensorCache"],
        "metrics.functions": ["evaluate", "create_metric"],
        "training.loop": ["train"],
        "api.search": ["search", "load"],
        "api.quantize": ["quantize", "calibrate"],
    },
)
__all__ = ["__version__", *__all__]
