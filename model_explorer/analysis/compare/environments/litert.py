"""The `litert` environment: the model converted to a .tflite flatbuffer by Google's litert-torch
(torch.export, then the LiteRT converter; no TensorFlow) and run by LiteRT's interpreter on the
CPU (its XNNPACK delegate), as a phone would run it.

The converter fixes every shape it is given, and a model that flattens with its batch size
(`x.view(x.size(0), -1)`) cannot be resized afterwards, so the file is converted for one
sample and run one sample at a time, as DeltaNN runs its images."""

from __future__ import annotations

import contextlib
import io
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from model_explorer.analysis.compare.environments.base import (
    ENVIRONMENTS,
    Environment,
    EnvironmentSkipped,
    logits,
    register_environment,
)
from model_explorer.analysis.compare.environments.deployed import DeployedEnvironment
from model_explorer.errors import first_line


class LiteRtEnvironment(Environment):
    """The model as a .tflite file in LiteRT's interpreter, one sample per invocation."""

    description = "LiteRT (litert-torch converter), CPU interpreter with XNNPACK, float32"
    exposes_intermediates = True

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.folder: tempfile.TemporaryDirectory[str] | None = None
        self.runner: Any = None
        self.tapped: tuple[Any, list[str]] | None = None
        self.source: tuple[nn.Module, Tensor] | None = None

    def prepare(self, model: nn.Module, example: Tensor) -> None:
        _require_litert()
        self.folder = tempfile.TemporaryDirectory(prefix="model_explorer_litert_")
        self.source = (model.eval(), example[:1])
        self.runner = _converted(model, example[:1], Path(self.folder.name) / "model.tflite")

    def run(self, inputs: Tensor) -> Tensor:
        return logits(torch.from_numpy(_per_sample(self.runner, inputs)[0]), self.name)

    def intermediates(self, inputs: Tensor) -> dict[str, Tensor] | None:
        """Every module's output as LiteRT computes it, by the tracer's names: a second file
        converted from the model with each module's output as an extra output (the last value
        a module returned, named after the last operator run inside it, as compare's ONNX taps
        name theirs)."""
        if self.tapped is None:
            assert self.source is not None and self.folder is not None
            self.tapped = _tapped(*self.source, Path(self.folder.name) / "tapped.tflite")
        runner, names = self.tapped
        outputs = _per_sample(runner, inputs)[1:]
        return {
            name: torch.from_numpy(value).to(torch.float64)
            for name, value in zip(names, outputs, strict=True)
        }

    def close(self) -> None:
        self.runner = self.tapped = self.source = None
        if self.folder is not None:
            self.folder.cleanup()
            self.folder = None


def _require_litert() -> None:
    try:
        import ai_edge_litert.interpreter  # noqa: F401
        import litert_torch  # noqa: F401
    except ImportError:
        raise EnvironmentSkipped(
            "litert-torch or ai-edge-litert is not installed; install the litert extra: "
            "pip install 'model_explorer[litert]'"
        ) from None


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
        raise EnvironmentSkipped(
            f"litert-torch cannot convert the model: {first_line(error)}"
        ) from None
    return Interpreter(model_path=str(path)).get_signature_runner()


def _per_sample(runner: Any, inputs: Tensor) -> list[np.ndarray]:
    """Every output of the file for each sample of `inputs`, stacked over the samples."""
    (name,) = runner.get_input_details()
    array = inputs.detach().to("cpu", torch.float32).numpy()
    found = [runner(**{name: array[index : index + 1]}) for index in range(len(array))]
    keys = sorted(found[0], key=lambda key: int(key.rpartition("_")[2] or 0))
    return [np.concatenate([outputs[key] for outputs in found]) for key in keys]


class _Tapped(nn.Module):
    """`model` returning its logits and then each listed module's last output, in the list's
    order (forward hooks, which torch.export traces)."""

    def __init__(self, model: nn.Module, modules: list[nn.Module]) -> None:
        super().__init__()
        self.model, self.tapped = model, modules

    def forward(self, inputs: Tensor) -> tuple[Tensor, ...]:
        found: dict[int, Tensor] = {}
        hooks = [
            module.register_forward_hook(
                # A copy: a later in-place operator (ReLU(inplace=True)) must not change it.
                lambda _, __, output, index=index: found.__setitem__(index, output.clone())
            )
            for index, module in enumerate(self.tapped)
        ]
        try:
            output = self.model(inputs)
        finally:
            for hook in hooks:
                hook.remove()
        return (output, *(found[index] for index in range(len(self.tapped))))


def _tapped(model: nn.Module, example: Tensor, path: Path) -> tuple[Any, list[str]]:
    """The file with every module's output beside the logits (modules that return a tensor,
    found by one eager run), and the tracer's names of those outputs."""
    from model_explorer.analysis.compare.environments.taps import tap_points

    candidates = tap_points(model, example)
    returned: set[int] = set()
    hooks = [
        module.register_forward_hook(
            lambda _, __, output, index=index: (
                returned.add(index) if isinstance(output, Tensor) else None
            )
        )
        for index, (_, module) in enumerate(candidates)
    ]
    try:
        with torch.no_grad():
            model(example)
    finally:
        for hook in hooks:
            hook.remove()
    kept = [candidates[index] for index in sorted(returned)]
    wrapper = _Tapped(model, [module for _, module in kept]).eval()
    return _converted(wrapper, example, path), [name for name, _ in kept]


class DeployedLiteRtEnvironment(DeployedEnvironment):
    """`deployed-litert:RESULTS#ID`: the individual converted by litert-torch with its
    quantizers as quantize/dequantize operators (deployment/litert.py) and run by LiteRT;
    its stand-in for localisation is the fake-quantized individual."""

    def __init__(self, name: str, context: Any, reference: str) -> None:
        super().__init__(name, context, reference, "litert")
        self.litert = LiteRtEnvironment(name)
        self.description = (
            f"{self.result.problem['name']} individual {self.individual.id}, quantize/dequantize "
            "operators in LiteRT"
        )

    def prepare(self, model: nn.Module, example: Tensor) -> None:
        from model_explorer.deployment.check import calibrated_individual
        from model_explorer.deployment.litert import litert_quantizers

        _require_litert()
        self._prepared = (model, example)
        quantized = calibrated_individual(self.context, self.result, self.individual, self.where)
        quantized.eval()
        with litert_quantizers(quantized, example[:1]):
            self.litert.prepare(quantized, example[:1])

    def run(self, inputs: Tensor) -> Tensor:
        return self.litert.run(inputs)

    def close(self) -> None:
        self.litert.close()
        super().close()


register_environment("litert")(lambda name, context: LiteRtEnvironment(name))


@ENVIRONMENTS.register_namespace("deployed-litert", placeholder="RESULTS#ID")
def deployed_litert_environment(reference: str, name: str, context: Any = None) -> Environment:
    return DeployedLiteRtEnvironment(name, context, reference)
