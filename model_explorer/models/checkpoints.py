"""Models of a workload: built from the `model:` spec, with checkpoints loaded and saved."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from model_explorer.errors import UserError
from model_explorer.fileio import atomic_path, read_torch_file
from model_explorer.models.registry import create_model
from model_explorer.models.spec import ModelSpec, ships_weights
from model_explorer.schema.paths import resolve_path


def build_model(
    spec: ModelSpec,
    where: str = "workload.model",
    load_weights: bool = True,
    fold: bool | None = None,
) -> nn.Module:
    """The workload's model in eval mode, with the checkpoint named by `weights` loaded
    (random weights only when `weights` is null and `pretrained` is explicitly false).

    Args:
        spec: the workload's `model:` section (type, num_classes, kwargs, weights, ...).
        where: the key path named in errors.
        load_weights: false for the freshly initialised model (training from scratch, shapes).
        fold: fold the batch norms (default: as `fold_batchnorm` says, with or without the
            weights: costs and energy count the layers that run); false for training.
    """
    folders = [spec.resolve(".")]  # the workload's root (the working directory without one)
    model = create_model(spec.type, spec.num_classes, where, folders, **spec.kwargs)
    if load_weights and spec.weights is not None:
        load_checkpoint(model, spec.resolve(spec.weights), where=f"{where}.weights")
    elif load_weights and spec.pretrained is not False and not ships_weights(spec.type):
        raise UserError(
            f"{where}.weights: no checkpoint is named; set it to a file made by "
            "`model-explorer retrain --baseline WORKLOAD`"
        )
    if spec.fold_batchnorm if fold is None else fold:
        return fold_batchnorm(model.eval(), where=f"{where}.fold_batchnorm")
    return model.eval()


def fold_batchnorm(model: nn.Module, where: str = "fold_batchnorm") -> nn.Module:
    """The trained `model` with every batch norm that only follows a convolution (or a linear
    layer) folded into it, as an integer deployment would run it. Traced by torch.fx with every
    convolution and linear layer a leaf, subclasses included (EfficientNet-Lite's
    `Conv2dStaticSamePadding`), so that a subclass keeps its own forward and is folded too (torch's
    `fuse` matches exact types only and traces through subclasses). Module names of the
    convolutions are kept, so quantization patterns still match."""
    from torch import fx
    from torch.nn.utils.fusion import fuse_conv_bn_eval, fuse_linear_bn_eval

    root = copy.deepcopy(model).eval()
    try:
        graph = _leaf_tracer().trace(root)
    except Exception as error:  # symbolic tracing fails in many ways on dynamic code
        raise UserError(
            f"{where}: torch.fx cannot trace the model to fold its batch norms "
            f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}); "
            "fold them in the model's code or set fold_batchnorm: false"
        ) from error
    modules = dict(root.named_modules())
    for node in list(graph.nodes):
        norm = modules.get(node.target) if node.op == "call_module" else None
        source = node.args[0] if norm is not None and node.args else None
        if not isinstance(norm, nn.modules.batchnorm._BatchNorm) or not norm.track_running_stats:
            continue
        if not isinstance(source, fx.Node) or source.op != "call_module" or len(source.users) > 1:
            continue
        product = modules[source.target]
        if isinstance(product, _CONVOLUTIONS):
            fused = fuse_conv_bn_eval(product, norm)
        elif isinstance(product, nn.Linear) and isinstance(norm, nn.BatchNorm1d):
            fused = fuse_linear_bn_eval(product, norm)
        else:
            continue
        parent, _, name = source.target.rpartition(".")
        setattr(root.get_submodule(parent) if parent else root, name, fused)
        node.replace_all_uses_with(source)
        graph.erase_node(node)
    return fx.GraphModule(root, graph).eval()


_CONVOLUTIONS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


def _leaf_tracer() -> Any:
    from torch import fx

    class LeafProducts(fx.Tracer):
        """torch.fx's tracer with every convolution and linear layer a leaf."""

        def is_leaf_module(self, module: nn.Module, qualified_name: str) -> bool:
            return isinstance(module, (*_CONVOLUTIONS, nn.Linear)) or super().is_leaf_module(
                module, qualified_name
            )

    return LeafProducts()


def _state_dict_of(checkpoint: Any) -> dict[str, torch.Tensor] | None:
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get("state_dict"), dict):
        checkpoint = checkpoint["state_dict"]
    if isinstance(checkpoint, dict) and all(
        isinstance(v, torch.Tensor) for v in checkpoint.values()
    ):
        return checkpoint
    return None


def load_checkpoint(model: nn.Module, path: str | os.PathLike[str], where: str = "weights") -> dict:
    """Load a state dict (plain, or under 'state_dict') into `model`; return the checkpoint."""
    file = resolve_path(path)
    if not file.is_file():
        raise UserError(
            f"{where}: checkpoint '{file}' does not exist; train one with "
            "`model-explorer retrain --baseline WORKLOAD` or point the key at an existing file"
        )
    checkpoint = read_torch_file(file, where, "PyTorch checkpoint")
    state = _state_dict_of(checkpoint)
    if state is None:
        raise UserError(
            f"{where}: '{file}' holds no state dict (expected tensors, plain or under 'state_dict')"
        )
    _check_fits(model, state, file, where)
    model.load_state_dict(state)
    return checkpoint if isinstance(checkpoint, dict) else {"state_dict": state}


def _check_fits(model: nn.Module, state: dict[str, torch.Tensor], file: Path, where: str) -> None:
    expected = model.state_dict()
    missing = [key for key in expected if key not in state]
    unexpected = [key for key in state if key not in expected]
    if missing or unexpected:
        detail = []
        if missing:
            detail.append(f"missing {missing[:3]}{' ...' if len(missing) > 3 else ''}")
        if unexpected:
            detail.append(f"unexpected {unexpected[:3]}{' ...' if len(unexpected) > 3 else ''}")
        raise UserError(
            f"{where}: '{file}' does not fit the model ({'; '.join(detail)}); is it a checkpoint "
            "of this model type?"
        )
    for key, tensor in state.items():
        if tensor.shape != expected[key].shape:
            raise UserError(
                f"{where}: '{file}' does not fit the model: '{key}' has shape "
                f"{list(tensor.shape)} in the file and {list(expected[key].shape)} in the model "
                "(check model.num_classes and model.kwargs)"
            )


def save_checkpoint(model: nn.Module, path: str | os.PathLike[str], **metadata: Any) -> Path:
    """Write the model's weights and plain metadata atomically; loadable with weights_only=True."""
    file = resolve_path(path)
    state = {key: value.detach().cpu() for key, value in model.state_dict().items()}
    with atomic_path(file) as temporary:
        torch.save({"state_dict": state, **metadata}, temporary)
    return file
