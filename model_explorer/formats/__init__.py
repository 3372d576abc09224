"""Quantizer formats: their numerics (integer.py, elements.py, blocks.py) and the registry of
formats with their options and costs (registry.py; the built-in entries in families.py)."""

from __future__ import annotations

from model_explorer.formats import families as _families  # noqa: F401 - registers the entries
from model_explorer.formats.registry import (
    FORMATS,
    Placement,
    QuantFormat,
    format_bits,
    integer_format,
    make_format,
    parse_format,
)

__all__ = [
    "FORMATS",
    "Placement",
    "QuantFormat",
    "format_bits",
    "integer_format",
    "make_format",
    "parse_format",
]
