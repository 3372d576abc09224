"""A format family's forms for other toolchains (formats/forms.py): modelopt's attributes and the
ONNX QDQ storage of every built-in format, and families planted by the tests, registered in
FORMATS alone, written by deployment/toolchains.py and deployment/encodings.py without either
naming them, or refused there in one sentence."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from model_explorer.deployment.toolchains import modelopt_config
from model_explorer.errors import UserError
from model_explorer.formats import FORMATS, Placement, format_bits, make_format, parse_format
from model_explorer.formats.forms import QDQForm
from model_explorer.formats.registry import FormatFamily
from model_explorer.quantization import QuantizedModel
from model_explorer.schema.specs import Bits, PositiveInt, Spec

# A convolution's weight: per-channel amax along its output channels, blocks along its inputs.
WEIGHT = Placement(axis=0, block_axis=1)


def dynamic(num_bits: Any, block: int, scale: tuple[int, int]) -> dict[str, Any]:
    return {"num_bits": num_bits, "block_sizes": {1: block, "type": "dynamic", "scale_bits": scale}}


# modelopt's attributes as its own configs spell them (INT8, FP8, INT4 blocks, MX, NVFP4).
MODELOPT = {
    "int8": {"num_bits": 8, "axis": 0, "unsigned": False, "narrow_range": False},
    "int4_g128": {
        "num_bits": 4,
        "unsigned": False,
        "narrow_range": False,
        "block_sizes": {1: 128, "type": "static"},
    },
    "fp8_e4m3": {"num_bits": (4, 3), "axis": 0},
    "fp8_e5m2": {"num_bits": (5, 2), "axis": 0},
    "mxfp8": dynamic((4, 3), 32, (8, 0)),
    "mxfp8_e5m2": dynamic((5, 2), 32, (8, 0)),
    "mxfp6_e2m3": dynamic((2, 3), 32, (8, 0)),
    "mxfp6_e3m2": dynamic((3, 2), 32, (8, 0)),
    "mxfp4": dynamic((2, 1), 32, (8, 0)),
    "mxfp4_b16": dynamic((2, 1), 16, (8, 0)),
    "mxint8": dynamic(8, 32, (8, 0)),
    "nvfp4": dynamic((2, 1), 16, (4, 3)),
    "nvfp4_b32": dynamic((2, 1), 32, (4, 3)),
}

BLOCK_SCALES = QDQForm.none("ONNX has no type for its block scales")
RUN_TIME_GROUPS = QDQForm.none("its group scales are computed from each input at run time")
# (weight, activation) storage of each format.
QDQ = {
    "int8": (QDQForm("integer"), QDQForm("integer")),
    "int4_g128": (QDQForm("integer_groups", bits=4, group_size=128), RUN_TIME_GROUPS),
    "fp8_e4m3": (QDQForm("float8", element="e4m3"),) * 2,
    "fp8_e5m2": (QDQForm("float8", element="e5m2"),) * 2,
    "mxfp6_e3m2": (BLOCK_SCALES, BLOCK_SCALES),
    "mxint8": (BLOCK_SCALES, BLOCK_SCALES),
    "nvfp4": (BLOCK_SCALES, BLOCK_SCALES),
}


@pytest.mark.parametrize("name", list(MODELOPT))
def test_each_format_writes_modelopts_attributes(name: str) -> None:
    assert parse_format(name).modelopt(WEIGHT) == MODELOPT[name]


@pytest.mark.parametrize("name", list(QDQ))
def test_each_format_declares_its_qdq_storage_or_why_it_has_none(name: str) -> None:
    chosen = parse_format(name)
    assert (chosen.qdq_form(weight=True), chosen.qdq_form(weight=False)) == QDQ[name]


@pytest.mark.parametrize("family", FORMATS.names())
def test_every_family_has_a_writer_for_the_storage_it_declares(family: str) -> None:
    pytest.importorskip("onnx", reason="the onnx extra is not installed")
    from model_explorer.deployment.encodings import _WRITERS

    entry = FORMATS.get(family)
    for weight in (True, False):
        form = entry.builder.qdq_form(entry.options(), weight)
        assert form.storage in (None, *_WRITERS), form
        assert form.storage is not None or form.reason
    config = entry.builder.modelopt(entry.options(), WEIGHT)
    assert config is None or "num_bits" in config


# -- planted families: one module's worth each, registered here and nowhere else -----------------
class GroupOptions(Spec):
    num_bits: Bits = 4
    group_size: PositiveInt = 8


class PlantedGroups(FormatFamily):
    """Group-wise integers of a family of its own, in the forms group-wise INT takes."""

    name = "planted_groups"
    qdq_takes = "weights"

    def bits(self, options: GroupOptions) -> float:
        return options.num_bits + 16 / options.group_size

    def element_bits(self, options: GroupOptions) -> int:
        return options.num_bits

    def quantize(
        self, x: Tensor, options: GroupOptions, amax: Tensor | None, placement: Placement
    ) -> Tensor:
        from model_explorer.formats.blocks import group_int_fake_quantize

        return group_int_fake_quantize(
            x, options.num_bits, options.group_size, placement.block_axis, placement.unsigned
        )

    def modelopt(self, options: GroupOptions, placement: Placement) -> dict[str, Any]:
        return {
            "num_bits": options.num_bits,
            "unsigned": placement.unsigned,
            "narrow_range": placement.narrow_range,
            "block_sizes": {placement.block_axis: options.group_size, "type": "static"},
        }

    def qdq_form(self, options: GroupOptions, weight: bool) -> QDQForm:
        if not weight:
            return QDQForm.none("its group scales are computed from each input at run time")
        return QDQForm("integer_groups", bits=options.num_bits, group_size=options.group_size)


class NoOptions(Spec):
    pass


class PlantedPlain(FormatFamily):
    """A family with no `element` option and no forms declared: the modelopt export took it
    for an MX format and failed on a KeyError."""

    name = "planted_plain"

    def bits(self, options: Any) -> float:
        return 8.0

    def element_bits(self, options: Any) -> int:
        return 8

    def quantize(
        self, x: Tensor, options: Any, amax: Tensor | None, placement: Placement
    ) -> Tensor:
        return x.half().float()


@pytest.fixture
def planted():  # noqa: ANN201
    for family, options in ((PlantedGroups, GroupOptions), (PlantedPlain, NoOptions)):
        FORMATS.register(family.name, options=options)(family())
    try:
        yield
    finally:
        for family in (PlantedGroups, PlantedPlain):
            FORMATS._entries.pop(family.name)
        format_bits.cache_clear()


def quantized(weight_format: Any) -> tuple[QuantizedModel, Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(16, 8, 3), nn.Flatten(), nn.Linear(8 * 4 * 4, 10)).eval()
    x = torch.randn(4, 16, 6, 6)
    model = QuantizedModel(copy.deepcopy(model))
    model.calibrate([x], method="max")
    for layer in model.layers.values():
        layer.weight_quantizer.format = weight_format
    return model, x


def test_a_family_registered_alone_is_written_for_modelopt_and_onnx(planted, tmp_path) -> None:
    onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed")
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    from model_explorer.deployment.encodings import encode, exportable
    from model_explorer.deployment.export import export_qdq

    ours, x = quantized(make_format("planted_groups"))
    int_groups, _ = quantized("int4_g8")
    with torch.no_grad():
        assert torch.equal(ours(x), int_groups(x))
    assert modelopt_config(ours) == modelopt_config(int_groups)
    assert "planted_groups (weights)" in exportable()
    for name, layer in ours.layers.items():
        mine = encode(layer.weight_quantizer, layer.weight, name)
        other = encode(int_groups.layers[name].weight_quantizer, layer.weight, name)
        assert mine.block_size == other.block_size == 8
        assert (mine.values == other.values).all() and (mine.scale == other.scale).all()
    export_qdq(ours, x[:1], tmp_path / "planted.onnx")
    stored = {
        tensor.name: numpy_helper.to_array(tensor)
        for tensor in onnx.load(str(tmp_path / "planted.onnx")).graph.initializer
    }
    assert any(values.dtype.itemsize == 1 and values.ndim == 4 for values in stored.values())
    (actual,) = ReferenceEvaluator(str(tmp_path / "planted.onnx")).run(None, {"input": x.numpy()})
    with torch.no_grad():
        torch.testing.assert_close(torch.from_numpy(actual), ours(x), atol=1e-4, rtol=1e-4)


def test_a_family_without_forms_is_refused_in_one_sentence(planted) -> None:
    pytest.importorskip("onnx", reason="the onnx extra is not installed")
    from model_explorer.deployment.encodings import encode

    model, _ = quantized(make_format("planted_plain"))
    with pytest.raises(
        UserError,
        match=r"^quantizer '0.weight_quantizer': format planted_plain has no modelopt form; "
        r"choose one of fp8_e4m3, fp8_e5m2, int, mxfp4, mxfp6, mxfp8, mxint8, nvfp4, "
        r"planted_groups for a modelopt export$",
    ):
        modelopt_config(model)
    layer = model.layers["0"]
    with pytest.raises(
        UserError,
        match=r"^conv: format planted_plain has no ONNX QDQ form \(the planted_plain family "
        r"declares none\); ONNX export takes fp8_e4m3, fp8_e5m2, int \(per tensor, per channel; "
        r"group-wise on weights\), planted_groups \(weights\)$",
    ):
        encode(layer.weight_quantizer, layer.weight, "conv")


def test_a_family_that_takes_no_bounds_is_handed_its_input_clamped(planted) -> None:
    """Bounds (an activation the quantizer takes over, quantization/elision.py) given to a
    family of the user's, whose `quantize` has no such argument: its input comes clamped by
    torch, the values of the activation followed by the format."""
    x = torch.randn(4, 16, 6, 6) * 8
    placement = Placement(block_axis=1)
    for chosen in (make_format("planted_plain"), make_format("planted_groups", group_size=4)):
        with torch.inference_mode():
            bounded = chosen.quantize(x, None, placement, bounds=(0.0, 6.0))
            expected = chosen.quantize(torch.nn.functional.relu6(x), None, placement)
        assert torch.equal(bounded, expected)
        assert not torch.equal(bounded, chosen.quantize(x, None, placement))


class ScaledFP6(FormatFamily):
    """A scaled FP6 family written as the built-in FP8 ones are, declaring the float8 storage
    for an element ONNX has no type for: its export once ended in KeyError('e3m2')."""

    name = "planted_fp6_e3m2"
    element: str | None = "e3m2"
    reads_amax = True

    def bits(self, options: Any) -> float:
        return 6.0

    def element_bits(self, options: Any) -> int:
        return 6

    def quantize(
        self, x: Tensor, options: Any, amax: Tensor | None, placement: Placement
    ) -> Tensor:
        return x

    def qdq_form(self, options: Any, weight: bool) -> QDQForm:
        return QDQForm("float8", element=self.element)


class ElementOptions(Spec):
    element: str  # no default: the forms are checked when first made


@pytest.mark.parametrize(
    ("element", "said"),
    [
        (
            "e3m2",
            r"a float8 QDQ form needs an element ONNX has a type for \(e4m3, e5m2\), not 'e3m2'",
        ),
        (None, "a QDQ form of storage 'float8' needs element"),
    ],
    ids=["an element onnx has no type for", "no element"],
)
def test_a_form_the_writers_cannot_write_is_refused_at_registration(
    element: str | None, said: str
) -> None:
    from model_explorer.formats.registry import register_format

    planted = type("Planted", (ScaledFP6,), {"element": element})
    with pytest.raises(UserError, match=rf"^format family 'planted_fp6_e3m2': {said}"):
        register_format(NoOptions)(planted)
    assert "planted_fp6_e3m2" not in FORMATS  # nothing half-registered
    # options without defaults: registered, and the form refused where it is made
    register_format(ElementOptions)(planted)
    try:
        with pytest.raises(UserError, match=said):
            FORMATS.get("planted_fp6_e3m2").builder.qdq_form(ElementOptions(element="x"), True)
    finally:
        FORMATS._entries.pop("planted_fp6_e3m2")
