"""Numerics of the quantizer formats beyond integers: FP8, MX, NVFP4 and group-wise integers.

Pure tensor functions, no state: `elements` defines the element types and the rounding to them.
Importing this package only imports its own modules.
"""

from __future__ import annotations

from model_explorer.quantization.formats.elements import ELEMENTS, Element, cast_element

__all__ = ["ELEMENTS", "Element", "cast_element"]
