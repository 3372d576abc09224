"""The format registry: names, options, bits per element and the choices a gene ranges over.

Oracles: the bits per element of each format computed by hand from its definition (OCP MX v1.0:
an 8-bit E8M0 scale per 32 elements; NVIDIA's NVFP4: an 8-bit E4M3 scale per 16; a group-wise
integer weight: an FP16 scale per group), and plans whose costs are summed by hand."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from model_explorer.cost.bits import BitCostModel, weighted_bits
from model_explorer.cost.layers import LayerCost
from model_explorer.errors import UserError
from model_explorer.formats import FORMATS, QuantFormat, integer_format, make_format, parse_format
from model_explorer.plan import PlanLayout, layer_formats
from model_explorer.problems.options import QuantizationOptions

# (short name, element bits, scale bits, elements per scale): bits = element + scale / block.
DEFINITIONS = [
    ("int8", 8, 0, 1),
    ("int4", 4, 0, 1),
    ("int4_g128", 4, 16, 128),
    ("int4_g32", 4, 16, 32),
    ("int8_g64", 8, 16, 64),
    ("fp8_e4m3", 8, 0, 1),
    ("fp8_e5m2", 8, 0, 1),
    ("mxfp8", 8, 8, 32),
    ("mxfp8_e5m2", 8, 8, 32),
    ("mxfp6_e3m2", 6, 8, 32),
    ("mxfp6_e2m3", 6, 8, 32),
    ("mxfp4", 4, 8, 32),
    ("mxint8", 8, 8, 32),
    ("nvfp4", 4, 8, 16),
    ("mxfp4_b16", 4, 8, 16),
]


@pytest.mark.parametrize(("name", "element", "scale", "block"), DEFINITIONS)
def test_bits_per_element_count_the_scales(name: str, element: int, scale: int, block: int) -> None:
    chosen = parse_format(name)
    assert chosen.bits == element + scale / block
    assert chosen.element_bits == element
    assert chosen.spelling == name
    assert parse_format(chosen.spelling) == chosen


def test_the_issue_figures() -> None:
    # MXFP4 4.25, NVFP4 4.5, INT4 with group 128 and an FP16 scale 4.125.
    assert parse_format("mxfp4").bits == 4.25
    assert parse_format("nvfp4").bits == 4.5
    assert parse_format("int4_g128").bits == 4.125


@pytest.mark.parametrize("family", FORMATS.names())
def test_every_family_spells_its_defaults_and_parses_them_back(family: str) -> None:
    chosen = make_format(family)
    assert isinstance(chosen, QuantFormat)
    assert parse_format(chosen.spelling) == chosen
    assert parse_format({"format": family}) == chosen
    assert chosen.bits >= chosen.element_bits
    assert FORMATS.get(family).builder.description


def test_a_mapping_and_a_short_name_are_one_format() -> None:
    assert parse_format({"format": "int", "num_bits": 4, "group_size": 128}) == parse_format(
        "int4_g128"
    )
    assert parse_format({"format": "mxfp6", "element": "e3m2"}) == parse_format("mxfp6_e3m2")
    assert parse_format("MXFP4 ") == parse_format("mxfp4")
    # The integer format at a bit width is the classic quantizer, whichever way it is written.
    assert integer_format(8) == parse_format("int8") == parse_format({"format": "int"})
    assert integer_format(8).classic and not parse_format("int8_g32").classic


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("mxfp5", "did you mean"),
        ("int1", "between 2 and 16"),
        ("int4_gx", "is not a format"),
        ("nvfp4_b0", "block_size"),
        ({"format": "int", "bits": 3}, "int has no option 'bits' (its options: num_bits"),
        ({"format": "fp9"}, "needs `format:` naming one of"),
        ({"num_bits": 4}, "needs `format:`"),
        ({"format": "mxfp6", "element": "e2m1"}, "element"),
        (7, "is not a format"),
    ],
)
def test_a_bad_format_is_one_sentence_naming_where(value: object, words: str) -> None:
    with pytest.raises(UserError) as raised:
        parse_format(value, "workload.problem.choices")
    text = str(raised.value)
    assert text.startswith("workload.problem.choices: ") and words in text
    assert "\n" not in text


def test_the_registry_and_its_costs_load_without_torch() -> None:
    code = (
        "import sys; from model_explorer.formats import parse_format; "
        "assert parse_format('nvfp4').bits == 4.5; assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- plans and costs ----------------------------------------------------------------------------


def test_a_plan_holds_formats_and_their_costs_are_bits_per_element() -> None:
    layout = PlanLayout(["a.input_quantizer", "a.weight_quantizer", "b.input_quantizer"])
    plan = layout.plan(["fp8_e4m3", "mxfp4", 6])
    assert plan == {
        "a": {"input_format": "fp8_e4m3", "weight_format": "mxfp4"},
        "b": {"input_bits": 6},
    }
    assert layer_formats(plan) == {
        "a": {"input": "fp8_e4m3", "weight": "mxfp4"},
        "b": {"input": "int6"},
    }
    assert weighted_bits(plan) == 8 + 4.25 + 6
    assert weighted_bits(plan, "bits_weighted_per_layer") == 5.0 * 8 + 0.5 * 4.25 + 5.0 * 6

    costs = BitCostModel(
        {"a": LayerCost(macs=100, weight_elements=30, input_elements=50, output_elements=20)}
    )
    plan = {"a": {"input_format": "nvfp4", "weight_format": "int4_g128"}}
    assert costs.model_size(plan) == 30 * 4.125
    assert costs.bops(plan) == 100 * 4.5 * 4.125
    # Bit widths keep their exact values: the integer format's cost is its width.
    assert costs.bops({"a": {"input_bits": 8, "weight_bits": 3}}) == 100 * 8 * 3


# -- choices in the problem's options -------------------------------------------------------------


def test_choices_are_ordered_cheapest_first_and_spelt_one_way() -> None:
    options = QuantizationOptions(
        choices=[
            "int8",
            {"format": "int", "num_bits": 4, "group_size": 128},
            "mxfp4",
            "nvfp4",
            "fp8_e4m3",
        ]
    )
    assert options.format_choices == ["int4_g128", "mxfp4", "nvfp4", "int8", "fp8_e4m3"]
    assert QuantizationOptions().format_choices is None


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"choices": ["int8", "mxfp5"]}, "is not a format"),
        ({"choices": ["int8", "int8"]}, "more than once"),
        ({"choices": []}, "names no format"),
        ({"choices": ["int8", "mxfp4"], "num_bits_lower_limit": 2}, "has no effect"),
        ({"choices": ["int8", "mxfp4"], "layer_bounds": {"*": [2, 4]}}, "gives bit widths"),
        ({"choices": ["int8", "mxfp4"], "layer_bounds": {"*": ["nvfp4"]}}, "does not list"),
        ({"layer_bounds": {"*": ["int8"]}}, "names formats, but the genes are bit widths"),
    ],
)
def test_bad_choices_are_refused(settings: dict, words: str) -> None:
    with pytest.raises(ValidationError) as raised:
        QuantizationOptions(**settings)
    assert words in str(raised.value)


def test_the_cli_lists_the_formats() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "model_explorer", "list", "formats"],
        capture_output=True,
        text=True,
        check=True,
    )
    for family in ("int", "fp8_e4m3", "fp8_e5m2", "mxfp8", "mxfp6", "mxfp4", "mxint8", "nvfp4"):
        assert family in done.stdout.split()


# -- formats in quantized layers ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["fp8_e4m3", "mxfp4", "mxfp6_e3m2", "nvfp4", "int4_g8", "mxint8"])
def test_a_layer_in_a_format_quantizes_along_its_input_channels(name: str) -> None:
    """A convolution and a linear layer in a format compute the float layer on operands that
    the format's numerics quantized: blocks along the input channels (axis 1 of an NCHW input
    and of an (out, in, kh, kw) or (out, in) weight), amax from calibration and the weight."""
    import torch
    from torch import nn

    from model_explorer.formats.blocks import (
        fp8_fake_quantize,
        group_int_fake_quantize,
        mx_fake_quantize,
        nvfp4_fake_quantize,
    )
    from model_explorer.formats.elements import ELEMENTS
    from model_explorer.quantization import QuantizedModel

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(40, 24, 3), nn.Flatten(), nn.Linear(24 * 4 * 4, 10)).eval()
    conv, linear = model[0], model[2]
    x = torch.randn(4, 40, 6, 6)
    reference = {
        "conv": (conv.weight.detach().clone(), x),
        "linear": (linear.weight.detach().clone(), torch.flatten(conv(x), 1).detach()),
    }
    quantized = QuantizedModel(model)
    quantized.calibrate([x], method="max")
    for quantizer in quantized.quantizers.values():
        quantizer.format = name
    chosen = parse_format(name)

    def expected(t, amax, axis, amax_axis):
        options = chosen.options
        if name.startswith("fp8"):
            return fp8_fake_quantize(t, amax, ELEMENTS["e4m3"], amax_axis)
        if name == "nvfp4":
            return nvfp4_fake_quantize(t, amax.max(), 16, axis)
        if name.startswith("int"):
            return group_int_fake_quantize(t, 4, options.group_size, axis)
        element = {"mxfp4": "e2m1", "mxfp6_e3m2": "e3m2", "mxint8": "int8"}[name]
        return mx_fake_quantize(t, ELEMENTS[element], 32, axis)

    with torch.no_grad():
        for layer_name, layer, function in (
            ("0", quantized.layers["0"], torch.nn.functional.conv2d),
            ("2", quantized.layers["2"], torch.nn.functional.linear),
        ):
            weight, data = reference["conv" if layer_name == "0" else "linear"]
            amax_in = data.abs().max()
            amax_w = weight.abs().amax(dim=tuple(range(1, weight.dim())))
            ours = layer(data)
            theirs = function(
                expected(data, amax_in, 1, None), expected(weight, amax_w, 1, 0), layer.bias
            )
            assert torch.equal(ours, theirs), layer_name


@pytest.mark.parametrize("name", ["fp8_e4m3", "int4_g8"])
def test_modelopt_rebuilds_a_model_in_a_format_from_the_exported_config(name: str) -> None:
    """modelopt (on the CPU: FP8 and block INT) applies `modelopt_config` of a model whose
    quantizers hold a format and computes what ours does: FP8 exactly; group-wise INT weights
    in the same groups (along the input channels), exactly where our scales are taken in FP32
    as modelopt keeps them (ours are stored as FP16)."""
    import copy

    import torch
    from torch import nn

    mtq = pytest.importorskip("modelopt.torch.quantization")
    from model_explorer.deployment.toolchains import modelopt_config
    from model_explorer.quantization import QuantizedModel

    torch.manual_seed(0)
    float_model = nn.Sequential(nn.Conv2d(16, 8, 3), nn.Flatten(), nn.Linear(8 * 4 * 4, 10)).eval()
    x = torch.randn(4, 16, 6, 6)
    ours = QuantizedModel(copy.deepcopy(float_model))
    ours.calibrate([x], method="max")
    for quantizer_name, quantizer in ours.quantizers.items():
        group_input = name.startswith("int") and quantizer_name.endswith("input_quantizer")
        quantizer.format = "int8" if group_input else name
    config = modelopt_config(ours)
    theirs = mtq.quantize(copy.deepcopy(float_model), config, forward_loop=lambda m: m(x))
    with torch.no_grad():
        mine, other = ours(x), theirs(x)
    if name.startswith("fp8"):
        assert torch.equal(mine, other)
        return
    from model_explorer.formats.blocks import group_int_fake_quantize

    with torch.no_grad():
        for index in ("0", "2"):
            layer = dict(theirs.named_modules())[index]
            expected = group_int_fake_quantize(layer.weight, 4, 8, 1, scale_dtype=None)
            assert torch.equal(layer.weight_quantizer(layer.weight), expected), index
    assert (mine - other).abs().max() <= 0.05 * other.abs().max()


def test_a_misspelled_format_is_offered_every_family_once() -> None:
    from model_explorer.formats.registry import example_spellings

    spellings = example_spellings()
    assert len(spellings) == len(set(spellings))
    assert {parse_format(name).family for name in spellings} == set(FORMATS.names())
    with pytest.raises(UserError, match="did you mean 'fp8_e4m3'"):
        parse_format("fp8_e4n3")
