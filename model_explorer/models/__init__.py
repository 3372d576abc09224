"""Models: the registry and the workload's `model:` settings (spec.py, no torch), the built-in
factories (small nets, digits_vit, efficientnet_lite0, all_minilm_l6_v2, torchvision models by
name; each imported when first built), create_model (registry.py) and checkpoints
(checkpoints.py: build_model, load and save, fold_batchnorm). Its public names load their
modules on first use (SPEC 1)."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "spec": ["MODELS", "ModelInfo", "ModelSpec", "register_model"],
        "registry": ["create_model"],
        "checkpoints": ["build_model", "fold_batchnorm", "load_checkpoint", "save_checkpoint"],
    },
)
