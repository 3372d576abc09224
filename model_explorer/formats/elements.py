"""The rounding to the element types of the new formats (FP8, FP6, FP4 minifloats, MX's INT8).

The element types themselves (bits, exponent and mantissa, largest value) are the table of
element_types.py, which imports no torch.

`cast_element` rounds to nearest, ties to even, and saturates (OCP OFP8 v1.0's saturating
conversion, which MX v1.0 uses for its elements: magnitudes beyond the largest normal become
±max_normal). ±Inf counts as such an overflow and becomes ±max_normal too, as in the saturating
mode of PTX's `cvt ... .satfinite` and in torch 2.14's own E4M3 cast: a fake quantizer models the
finite hardware, whose saturating conversion has no Inf to give back. NaN stays NaN, also for
FP6, FP4 and INT8, which cannot encode it: fake quantization returns float32, and hiding a NaN
would hide the fault that made it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from model_explorer.formats.element_types import ELEMENTS, Element  # noqa: F401 - re-exported
from model_explorer.formats.layout import straight_through

# The float32 exponent field: masking a magnitude's bits with it leaves 2**floor(log2|x|).
_FLOAT32_EXPONENT_MASK = 0x7F800000


def cast_element(x: Tensor, element: Element) -> Tensor:
    """x (float32) rounded to the nearest representable value of the element type, ties to even,
    saturated to ±max_normal; NaN stays NaN; subnormals as the type defines them. Returns float32.

    ±Inf saturates to ±max_normal (see the module's docstring); -0.0 stays -0.0. Where `x` needs
    a gradient it passes straight through. The rounding is computed from the element's definition
    for every type: for E4M3 and E5M2 it gives what torch's float8 casts give (the tests check
    every value and midpoint), four times faster on the CPU than their round trip.
    """
    x = x.float()
    if torch.is_grad_enabled() and x.requires_grad:
        return straight_through(x, cast_element(x.detach(), element))
    return _round_saturated(x.clamp(-element.max_normal, element.max_normal), element)


def cast_element_(values: Tensor, element: Element) -> Tensor:
    """`cast_element` in place on a float32 tensor the caller owns (no gradient): the format
    functions round their scaled copy of the input without allocating another."""
    return _round_saturated(values.clamp_(-element.max_normal, element.max_normal), element)


def _round_saturated(values: Tensor, element: Element) -> Tensor:
    """Round, in place, values already within ±max_normal (NaN passes as NaN): max_normal lies
    on the grid, so saturating before rounding is exact and nothing rounds past it."""
    if element.exponent_bits == 0:  # one evenly spaced binade: MX INT8
        step = element.smallest_subnormal
        return values.mul_(1.0 / step).round_().mul_(step)
    # 2**floor(log2|x|) from the float32 exponent bits alone (the sign bit masked off too); zero
    # and float32 subnormals give 0, which the clamp lifts into the element's subnormal binade,
    # where the step is constant. NaN gives Inf, and NaN / Inf * Inf stays NaN.
    binade = values.view(torch.int32).bitwise_and(_FLOAT32_EXPONENT_MASK).view(torch.float32)
    step = binade.clamp_(min=2.0**element.min_exponent).mul_(2.0**-element.mantissa_bits)
    # x / step is exact (a power of two); rounding it half to even, symmetric about zero, rounds
    # the mantissa to nearest even and keeps the sign, -0.0 included.
    return values.div_(step).round_().mul_(step)
