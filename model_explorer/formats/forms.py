"""How a format is written for other toolchains, as plain data its family declares: modelopt's
quantizer attributes and the ONNX QDQ storage (LiteRT's quantize/dequantize operators are the
integer kind of it). The writers (deployment/toolchains.py, deployment/encodings.py) read these and
never ask which family a format is, so a new family brings its forms along; no torch here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from model_explorer.errors import UserError
from model_explorer.formats.element_types import ELEMENTS

# The elements ONNX's float8 tensors hold (FLOAT8E4M3FN, FLOAT8E5M2).
ONNX_FLOAT8 = ("e4m3", "e5m2")

# modelopt's spelling of MX's shared E8M0 scale: 8 exponent bits, no mantissa.
E8M0 = (8, 0)

Storage = Literal["integer", "integer_groups", "float8"]


@dataclass(frozen=True)
class QDQForm:
    """A format's ONNX QDQ storage, or why it has none (`storage` None, `reason` saying why).

    "integer": the integer format per tensor or per channel, stored from the quantizer's own
    integer levels and scales (its cached parameters: no other numerics can declare it);
    "integer_groups": a weight's `bits`-bit integers with one FP16
    scale per `group_size` values along the layer's input channels (DequantizeLinear's blocked
    form); "float8": `element` (e4m3 or e5m2) scaled so that the amax maps to its largest
    value, per tensor or per channel.
    """

    storage: Storage | None
    bits: int | None = None
    group_size: int | None = None
    element: str | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        """A form the writers could not write is refused where it is made (a family's
        `qdq_form`, probed when the family is registered), in one sentence."""
        wanted = {"float8": ("element",), "integer_groups": ("bits", "group_size")}
        missing = [
            name for name in wanted.get(self.storage or "", ()) if getattr(self, name) is None
        ]
        if missing:
            raise UserError(
                f"a QDQ form of storage '{self.storage}' needs {' and '.join(missing)}; give "
                "them, or declare QDQForm.none(reason) where the format has no such form"
            )
        if self.storage == "float8" and self.element not in ONNX_FLOAT8:
            typed = ", ".join(ONNX_FLOAT8)
            raise UserError(
                f"a float8 QDQ form needs an element ONNX has a type for ({typed}), not "
                f"'{self.element}'; declare QDQForm.none(reason) for this format"
            )

    @classmethod
    def none(cls, reason: str) -> QDQForm:
        return cls(None, reason=reason)


def modelopt_bits(element: str) -> int | tuple[int, int]:
    """modelopt's `num_bits` for an element type: (exponent, mantissa) bits of a minifloat, the
    width of an integer element."""
    found = ELEMENTS[element]
    if found.exponent_bits == 0:
        return found.bits
    return (found.exponent_bits, found.mantissa_bits)


def modelopt_dynamic_blocks(
    element: str, block_size: int, scale_bits: tuple[int, int], axis: int
) -> dict[str, Any]:
    """modelopt's attributes of a block format with scales computed at run time (as its own MX
    and NVFP4 configs have them): `block_size` elements along `axis` share one scale."""
    return {
        "num_bits": modelopt_bits(element),
        "block_sizes": {
            axis: block_size,
            "type": "dynamic",
            "scale_bits": scale_bits,
        },
    }
