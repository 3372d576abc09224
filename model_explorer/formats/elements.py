"""Element types of the new formats (FP8, FP6, FP4 minifloats, MX's INT8) and the rounding to them.

A minifloat with `e` exponent and `m` mantissa bits has the exponent bias `2**(e-1) - 1`; every
exponent code is a normal binade except code 0 (the subnormals, spaced `2**(1 - bias - m)`) and,
where the type has them, the codes OCP reserves for Inf/NaN, which are why E4M3's largest value is
448 (not 480) and E5M2's 57344 (not 114688). FP6 and FP4 have no Inf or NaN encodings.

`cast_element` rounds to nearest, ties to even, and saturates (OCP OFP8 v1.0's saturating
conversion, which MX v1.0 uses for its elements: magnitudes beyond the largest normal become
±max_normal). ±Inf counts as such an overflow and becomes ±max_normal too, as in the saturating
mode of PTX's `cvt ... .satfinite` and in torch 2.14's own E4M3 cast: a fake quantizer models the
finite hardware, whose saturating conversion has no Inf to give back. NaN stays NaN, also for
FP6, FP4 and INT8, which cannot encode it: fake quantization returns float32, and hiding a NaN
would hide the fault that made it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from model_explorer.formats.layout import straight_through

# The float32 exponent field: masking a magnitude's bits with it leaves 2**floor(log2|x|).
_FLOAT32_EXPONENT_MASK = 0x7F800000


@dataclass(frozen=True)
class Element:
    """An element type: a minifloat (exponent_bits > 0) or MX's 8-bit integer.

    MX INT8 (exponent_bits 0) is a fixed-point number k / 64 with k in [-127, 127]: OCP MX v1.0's
    two's-complement INT8 element with an implicit scale of 2**-6, used symmetrically (the code
    -128, -2.0, is never produced), as in Microsoft's MX reference implementation (sign-magnitude
    INT8, max 1 63/64) and in modelopt's MX kernels ("a symmetrized Q1.6 type"). Its
    `mantissa_bits` are the 6 fraction bits, so that the step `2**(emax - mantissa_bits)` is the
    same formula as a minifloat's.
    """

    name: str  # "e4m3", "e5m2", "e3m2", "e2m3", "e2m1", "int8"
    bits: int  # storage bits per element
    exponent_bits: int
    mantissa_bits: int
    max_normal: float  # the largest finite magnitude
    emax: int  # exponent of the largest normal power of two: MX's shared scale uses it

    @property
    def min_exponent(self) -> int:
        """The exponent of the smallest normal binade (subnormals share its step); for INT8,
        whose grid is one evenly spaced binade, emax."""
        if self.exponent_bits == 0:
            return self.emax
        return 2 - 2 ** (self.exponent_bits - 1)

    @property
    def smallest_subnormal(self) -> float:
        """The smallest positive value: the step of the lowest binade."""
        return 2.0 ** (self.min_exponent - self.mantissa_bits)


ELEMENTS: dict[str, Element] = {
    element.name: element
    for element in (
        Element("e4m3", 8, 4, 3, 448.0, 8),
        Element("e5m2", 8, 5, 2, 57344.0, 15),
        Element("e3m2", 6, 3, 2, 28.0, 4),
        Element("e2m3", 6, 2, 3, 7.5, 2),
        Element("e2m1", 4, 2, 1, 6.0, 2),
        Element("int8", 8, 0, 6, 127 / 64, 0),
    )
}


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
