"""The built-in quantizer formats: integers (per tensor, per channel or per group), FP8, the OCP
Microscaling formats and NVFP4, each registered in FORMATS with its options, its cost and its
modelopt and ONNX QDQ forms."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from model_explorer.formats.element_types import ELEMENTS
from model_explorer.formats.forms import E8M0, QDQForm, modelopt_bits, modelopt_dynamic_blocks
from model_explorer.formats.registry import FormatFamily, Placement, register_format
from model_explorer.schema.specs import Bits, PositiveInt, Spec

if TYPE_CHECKING:
    from torch import Tensor

# Bits of the scale a group-wise integer format stores per group (an FP16 scale, as deployed
# INT4 weights hold it); MX and NVFP4 store 8-bit scales (E8M0, E4M3) per block.
GROUP_SCALE_BITS = 16
BLOCK_SCALE_BITS = 8


def _needs_amax(name: str, amax: Tensor | None) -> Tensor:
    if amax is None:
        raise RuntimeError(
            f"a {name} quantizer has no amax yet: calibrate the model or load a calibration file"
        )
    return amax


class IntOptions(Spec):
    """`num_bits` levels of a symmetric integer grid; `group_size`: one scale per that many
    consecutive values along the layer's input channels (None: per tensor or per channel, as
    the quantizer's axis says)."""

    num_bits: Bits = 8
    """Bits of each integer element, 2 to 16; whether the grid is signed is the quantizer's
    `unsigned` setting."""
    group_size: PositiveInt | None = None
    """Consecutive values along the layer's input channels that share one FP16 scale, taken from
    the group's own max without calibration (`int4_g128`: 4 + 16/128 bits per element); when
    not given, one calibrated scale per tensor or per channel, as the quantizer's `axis` says."""


@register_format(IntOptions)
class IntFormat(FormatFamily):
    name = "int"
    description = (
        "symmetric integers, amax based (NVIDIA TensorQuantizer), per tensor or channel: "
        "num_bits; group_size: one FP16 scale per group of input channels (int4_g128: 4.125)"
    )
    qdq_takes = "per tensor, per channel; group-wise on weights"
    takes_bounds = True

    def calibrated(self, options: IntOptions) -> bool:
        return options.group_size is None

    def classic(self, options: IntOptions) -> bool:
        return options.group_size is None

    def modelopt(self, options: IntOptions, placement: Placement) -> dict[str, Any]:
        if options.group_size is None:
            return {
                "num_bits": options.num_bits,
                "axis": placement.axis,
                "unsigned": placement.unsigned,
                "narrow_range": placement.narrow_range,
            }
        return {
            "num_bits": options.num_bits,
            "unsigned": placement.unsigned,
            "narrow_range": placement.narrow_range,
            # Static: right for a weight (its groups' max); modelopt calibrates an input's static
            # groups once where ours take each group's max at run time, and its dynamic integer
            # blocks need scale formats other than our FP16.
            "block_sizes": {placement.block_axis: options.group_size, "type": "static"},
        }

    def qdq_form(self, options: IntOptions, weight: bool) -> QDQForm:
        if options.group_size is None:
            return QDQForm("integer")
        if not weight:
            return QDQForm.none("its group scales are computed from each input at run time")
        return QDQForm("integer_groups", bits=options.num_bits, group_size=options.group_size)

    def bits(self, options: IntOptions) -> float:
        if options.group_size is None:
            return float(options.num_bits)
        return options.num_bits + GROUP_SCALE_BITS / options.group_size

    def element_bits(self, options: IntOptions) -> int:
        return options.num_bits

    def spelling(self, options: IntOptions) -> str:
        group = f"_g{options.group_size}" if options.group_size else ""
        return f"int{options.num_bits}{group}"

    def parse(self, text: str) -> dict[str, Any] | None:
        stem, _, group = text.partition("_g")
        if not stem.startswith("int") or not stem[3:].isdigit():
            return None
        if group and not group.isdigit():
            return None
        options: dict[str, Any] = {"num_bits": int(stem[3:])}
        if group:
            options["group_size"] = int(group)
        return options

    def quantize(
        self,
        x: Tensor,
        options: IntOptions,
        amax: Tensor | None,
        placement: Placement,
        bounds: tuple[float, float] | None = None,
    ) -> Tensor:
        from model_explorer.formats import blocks, integer

        if options.group_size is None:
            return integer.fake_quantize(
                x,
                _needs_amax(self.name, amax),
                options.num_bits,
                placement.unsigned,
                placement.narrow_range,
                placement.axis,
                bounds=bounds,
            )
        return blocks.group_int_fake_quantize(
            x,
            options.num_bits,
            options.group_size,
            placement.block_axis,
            placement.unsigned,
            placement.narrow_range,
            bounds=bounds,
        )


class NoOptions(Spec):
    """The format takes no options."""


class _FP8(FormatFamily):
    element = ""
    reads_amax = True
    qdq_takes = ""
    takes_bounds = True

    def bits(self, options: Any) -> float:
        return 8.0

    def element_bits(self, options: Any) -> int:
        return 8

    def quantize(
        self,
        x: Tensor,
        options: Any,
        amax: Tensor | None,
        placement: Placement,
        bounds: tuple[float, float] | None = None,
    ) -> Tensor:
        from model_explorer.formats import blocks

        amax = _needs_amax(self.name, amax)
        element = ELEMENTS[self.element]
        return blocks.fp8_fake_quantize(x, amax, element, placement.axis, bounds=bounds)

    def modelopt(self, options: Any, placement: Placement) -> dict[str, Any]:
        return {"num_bits": modelopt_bits(self.element), "axis": placement.axis}

    def qdq_form(self, options: Any, weight: bool) -> QDQForm:
        return QDQForm("float8", element=self.element)


@register_format(NoOptions)
class FP8E4M3(_FP8):
    name, element = "fp8_e4m3", "e4m3"
    description = "FP8 E4M3 (torch.float8_e4m3fn), scaled so that amax maps to 448: 8 bits"


@register_format(NoOptions)
class FP8E5M2(_FP8):
    name, element = "fp8_e5m2", "e5m2"
    description = "FP8 E5M2 (torch.float8_e5m2), scaled so that amax maps to 57344: 8 bits"


class MXOptions(Spec):
    """`block_size` values along the layer's input channels share one E8M0 scale."""

    block_size: PositiveInt = 32
    """Consecutive values along the layer's input channels that share one E8M0 (power of two)
    scale, taken from the block's own max (the default is OCP's; `mxfp4_b16` spells 16); the
    scale adds 8/`block_size` bits per element."""


class MXFP8Options(MXOptions):
    element: Literal["e4m3", "e5m2"] = "e4m3"
    """The FP8 element type: `e4m3` (more precision, plain `mxfp8`) or `e5m2` (more range,
    `mxfp8_e5m2`)."""


class MXFP6Options(MXOptions):
    element: Literal["e2m3", "e3m2"] = "e2m3"
    """The FP6 element type: `e2m3` (more precision, `mxfp6_e2m3`) or `e3m2` (more range,
    `mxfp6_e3m2`)."""


class _MX(FormatFamily):
    """OCP Microscaling v1.0: dynamic power-of-two block scales, nothing calibrated."""

    takes_bounds = True
    elements: tuple[str, ...] = ()
    # The element the family's name alone is spelt for (None: always spelt with its element).
    bare: str | None = None

    def _element(self, options: Any) -> str:
        # a field's presence asked of the class: pydantic answers a missing attribute slowly
        return options.element if "element" in type(options).model_fields else self.elements[0]

    def bits(self, options: Any) -> float:
        return ELEMENTS[self._element(options)].bits + BLOCK_SCALE_BITS / options.block_size

    def element_bits(self, options: Any) -> int:
        return ELEMENTS[self._element(options)].bits

    def spelling(self, options: Any) -> str:
        element = self._element(options)
        text = self.name if element == self.bare else f"{self.name}_{element}"
        return text + (f"_b{options.block_size}" if options.block_size != 32 else "")

    def parse(self, text: str) -> dict[str, Any] | None:
        if text == self.name:
            return {}
        stem, _, element = text.rpartition("_")
        if stem == self.name and len(self.elements) > 1 and element in self.elements:
            return {"element": element}
        return None

    def quantize(
        self,
        x: Tensor,
        options: Any,
        amax: Tensor | None,
        placement: Placement,
        bounds: tuple[float, float] | None = None,
    ) -> Tensor:
        from model_explorer.formats import blocks

        element = ELEMENTS[self._element(options)]
        size, axis = options.block_size, placement.block_axis
        return blocks.mx_fake_quantize(x, element, size, axis, bounds=bounds)

    def modelopt(self, options: Any, placement: Placement) -> dict[str, Any]:
        element = self._element(options)
        return modelopt_dynamic_blocks(element, options.block_size, E8M0, placement.block_axis)

    def qdq_form(self, options: Any, weight: bool) -> QDQForm:
        return QDQForm.none("ONNX has no type for its block scales")


@register_format(MXFP8Options)
class MXFP8(_MX):
    # MXFP8 without a suffix is E4M3, as OCP's table lists it first.
    name, elements, bare = "mxfp8", ("e4m3", "e5m2"), "e4m3"
    description = "OCP MXFP8: FP8 elements (element e4m3 or e5m2), 32 per E8M0 scale: 8.25 bits"


@register_format(MXFP6Options)
class MXFP6(_MX):
    name, elements = "mxfp6", ("e2m3", "e3m2")
    description = "OCP MXFP6: FP6 elements (element e2m3 or e3m2), 32 per E8M0 scale: 6.25 bits"


@register_format(MXOptions)
class MXFP4(_MX):
    name, elements, bare = "mxfp4", ("e2m1",), "e2m1"
    description = "OCP MXFP4: FP4 E2M1 elements, 32 per E8M0 scale: 4.25 bits"


@register_format(MXOptions)
class MXINT8(_MX):
    name, elements, bare = "mxint8", ("int8",), "int8"
    description = "OCP MXINT8: 8-bit integer elements (scale 2^-6), 32 per E8M0 scale: 8.25 bits"


class NVFP4Options(Spec):
    """`block_size` E2M1 values share one FP8 E4M3 scale (16 in NVIDIA's definition)."""

    block_size: PositiveInt = 16
    """Consecutive E2M1 values along the layer's input channels that share one FP8 E4M3 scale,
    beside the tensor's FP32 scale from amax (the default is NVIDIA's; `nvfp4_b32` spells 32);
    the block scale adds 8/`block_size` bits per element."""


@register_format(NVFP4Options)
class NVFP4(FormatFamily):
    name = "nvfp4"
    description = (
        "NVIDIA NVFP4: E2M1 elements, 16 per FP8 E4M3 block scale, one FP32 scale per tensor "
        "from amax: 4.5 bits"
    )
    reads_amax = True
    takes_bounds = True

    def bits(self, options: NVFP4Options) -> float:
        return 4 + BLOCK_SCALE_BITS / options.block_size

    def element_bits(self, options: NVFP4Options) -> int:
        return 4

    def spelling(self, options: NVFP4Options) -> str:
        return self.name + (f"_b{options.block_size}" if options.block_size != 16 else "")

    def quantize(
        self,
        x: Tensor,
        options: NVFP4Options,
        amax: Tensor | None,
        placement: Placement,
        bounds: tuple[float, float] | None = None,
    ) -> Tensor:
        from model_explorer.formats import blocks

        amax = _needs_amax(self.name, amax)
        # One scale per tensor: a per-channel amax (a weight's) contributes its largest value.
        size, axis = options.block_size, placement.block_axis
        tensor_amax = amax if amax.dim() == 0 else amax.max()
        return blocks.nvfp4_fake_quantize(x, tensor_amax, size, axis, bounds=bounds)

    def modelopt(self, options: NVFP4Options, placement: Placement) -> dict[str, Any]:
        scale = modelopt_bits("e4m3")
        return modelopt_dynamic_blocks("e2m1", options.block_size, scale, placement.block_axis)

    def qdq_form(self, options: NVFP4Options, weight: bool) -> QDQForm:
        return QDQForm.none("ONNX has no type for its block scales")
