"""Numerics of the quantizer formats beyond integers: FP8, MX, NVFP4 and group-wise integers.

Pure tensor functions, no state: `elements` defines the element types and the rounding to them,
`blocks` the scaled and block-scaled fake quantization built on it (`layout`: the blocks along an
axis and the straight-through return they share). Importing this package only imports its own
modules, and does nothing else.
"""

from __future__ import annotations

from model_explorer.quantization.formats.blocks import (
    fp8_fake_quantize,
    group_int_fake_quantize,
    mx_fake_quantize,
    nvfp4_fake_quantize,
)
from model_explorer.quantization.formats.elements import ELEMENTS, Element, cast_element

__all__ = [
    "ELEMENTS",
    "Element",
    "cast_element",
    "fp8_fake_quantize",
    "group_int_fake_quantize",
    "mx_fake_quantize",
    "nvfp4_fake_quantize",
]
