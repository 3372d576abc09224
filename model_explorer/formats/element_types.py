"""The element types of the FP8, MX and NVFP4 formats by name, as plain data (no torch): the one
table that the numerics (elements.py), the costs and the modelopt spellings read.

A minifloat with `e` exponent and `m` mantissa bits has the exponent bias `2**(e-1) - 1`; every
exponent code is a normal binade except code 0 (the subnormals, spaced `2**(1 - bias - m)`) and,
where the type has them, the codes OCP reserves for Inf/NaN, which are why E4M3's largest value is
448 (not 480) and E5M2's 57344 (not 114688). FP6 and FP4 have no Inf or NaN encodings.
"""

from __future__ import annotations

from dataclasses import dataclass


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
