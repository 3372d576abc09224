"""LiteRT: a PyTorch model converted to a .tflite flatbuffer by Google's litert-torch
(torch.export, then the LiteRT converter; no TensorFlow) and run by LiteRT's interpreter on the
CPU (its XNNPACK delegate), as a phone would run it.

The converter fixes every shape it is given, and a model that flattens with its batch size
(`x.view(x.size(0), -1)`) cannot be resized afterwards, so the file is converted for one
sample and run one sample at a time, as DeltaNN runs its images. LiteRT reads PyTorch, not
ONNX: an individual reaches it with its quantizers as PyTorch's quantize/dequantize operators
(deployment/litert.py)."""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from model_explorer.deployment.runtimes.base import Runtime, RuntimeUnavailable, register_runtime
from model_explorer.errors import first_line


@register_runtime
class LiteRt(Runtime):
    """The model as a .tflite file in LiteRT's interpreter, one sample per invocation."""

    name = "litert"
    description = "LiteRT (litert-torch converter), CPU interpreter with XNNPACK (extra: litert)"
    extra = "litert"
    settings = {"default": "the interpreter's defaults (XNNPACK), float32"}
    reads = "pytorch"

    def require(self) -> None:
        try:
            import ai_edge_litert.interpreter  # noqa: F401
            import litert_torch  # noqa: F401
        except ImportError:
            raise RuntimeUnavailable(
                "litert-torch or ai-edge-litert is not installed; install the litert extra: "
                "pip install 'model_explorer[litert]'"
            ) from None
        self.version = _version()
        self.runner: Any = None

    def activate_model(self, model: Any, example: Any, folder: Path) -> None:
        self.runner = _converted(model.eval(), example[:1], folder / "model.tflite")

    def infer(self, inputs: np.ndarray) -> dict[str, np.ndarray]:
        return _per_sample(self.runner, inputs)

    def tap(self, model: Any, example: Any, folder: Path) -> Any:
        """A second file converted from the model with each module's output as an extra
        output (the last value a module returned, named after the last operator run inside
        it, as the ONNX taps name theirs)."""
        runner, names = _tapped(model.eval(), example[:1], folder / "tapped.tflite")
        outputs = [str(position) for position in range(1, len(names) + 1)]
        return (lambda array: _per_sample(runner, array)), list(zip(outputs, names, strict=True))

    def deactivate(self) -> None:
        self.runner = None


def _version() -> str:
    import importlib.metadata

    return importlib.metadata.version("ai-edge-litert")


def _converted(model: nn.Module, example: Tensor, path: Path) -> Any:
    """`model` converted for `example`'s shape, written to `path`, opened in LiteRT: its
    signature runner."""
    import litert_torch
    from ai_edge_litert.interpreter import Interpreter

    try:
        # The converter's progress lines would interleave with compare's output.
        with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            litert_torch.convert(model, (example,)).export(str(path))
    except Exception as error:  # the converter raises many kinds for what it cannot capture
        raise RuntimeUnavailable(
            f"litert-torch cannot convert the model: {first_line(error)}"
        ) from None
    return Interpreter(model_path=str(path)).get_signature_runner()


def _per_sample(runner: Any, array: np.ndarray) -> dict[str, np.ndarray]:
    """Every output of the file for each sample of the batch, stacked over the samples, by
    its position ("0" the model's output, then the taps)."""
    (name,) = runner.get_input_details()
    found = [runner(**{name: array[index : index + 1]}) for index in range(len(array))]
    keys = sorted(found[0], key=lambda key: int(key.rpartition("_")[2] or 0))
    return {
        str(position): np.concatenate([outputs[key] for outputs in found])
        for position, key in enumerate(keys)
    }


def _tapped(model: nn.Module, example: Tensor, path: Path) -> tuple[Any, list[str]]:
    """The file with every module's output beside the logits, and the tracer's names of
    those outputs."""
    from model_explorer.deployment.runtimes.taps import tapped_module

    wrapper, names = tapped_module(model, example)
    return _converted(wrapper, example, path), names
