"""The quantizer formats by name (`model-explorer list formats`), and a format with its options.

A format family (an entry of FORMATS) says in one place what its options are, how it
fake-quantizes a tensor, whether it reads a calibrated amax, what one element costs in bits
**with its scales counted** (a block of 32 MXFP4 elements shares one 8-bit scale: 4.25 bits),
and how other toolchains write it (forms.py: modelopt's attributes, the ONNX QDQ storage), so
that a new format is its family and nothing else.
A `QuantFormat` is a family with its options: what a quantizer applies and what one choice of
a search's gene stands for. It is spelt in workloads and plans as a short name (`int8`,
`int4_g128`, `fp8_e4m3`, `mxfp6_e3m2`, `mxfp4`, `nvfp4`, `mxfp4_b16` for another block size) or
as a mapping (`{format: int, num_bits: 4, group_size: 128}`); `spelling` gives the short name
back, so a plan stores plain strings. The registry and the costs import no torch; a family
imports its numerics when it first quantizes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from model_explorer.errors import UserError, did_you_mean
from model_explorer.formats.forms import QDQForm
from model_explorer.schema.registry import Registry

if TYPE_CHECKING:  # the registry and the costs load without torch (results in a notebook)
    from torch import Tensor


@dataclass(frozen=True)
class Placement:
    """Where a quantizer sits: `axis` of its per-channel amax (None: per tensor), `block_axis`
    along which blocks and groups run (a layer's reduction axis: input channels), signedness
    and range of integer levels."""

    axis: int | None = None
    block_axis: int = -1
    unsigned: bool = False
    narrow_range: bool = False


class FormatFamily:
    """One entry of FORMATS; subclasses fill in the class attributes and the methods.

    `reads_amax`: reads an amax (per tensor or per channel) from calibration (inputs) or from
    the weight; block formats with dynamic scales read none. `description` is for `list`.
    `qdq_takes`: what of the family ONNX's QDQ form holds, as refusals list it ("": all of it,
    None: none). `takes_bounds`: `quantize` takes `bounds`, (floor, ceiling) to clamp the input
    to first, into its own pass (an activation it takes over, quantization/elision.py); a family
    without it is handed the input clamped by torch. A family without
    `modelopt` or `qdq_form` of its own has no such form, and the writers refuse it in one sentence.
    """

    name: str = ""
    description: str = ""
    reads_amax: bool = False
    qdq_takes: str | None = None
    takes_bounds: bool = False

    def calibrated(self, options: Any) -> bool:
        """Whether a quantizer in this format reads an amax."""
        return self.reads_amax

    def bits(self, options: Any) -> float:
        """Bits per element, scale overhead included."""
        raise NotImplementedError

    def element_bits(self, options: Any) -> int:
        """Storage bits of one element, without scales."""
        raise NotImplementedError

    def spelling(self, options: Any) -> str:
        """The short name of the family with these options."""
        return self.name

    def parse(self, text: str) -> dict[str, Any] | None:
        """The options a short name stands for, or None when it is not this family's."""
        return {} if text == self.name else None

    def quantize(
        self, x: Tensor, options: Any, amax: Tensor | None, placement: Placement
    ) -> Tensor:
        raise NotImplementedError

    def calibration_bits(self, options: Any) -> int:
        """The bit width whose amax a calibrator that depends on widths should give."""
        return self.element_bits(options)

    def classic(self, options: Any) -> bool:
        """Whether the format is the integer one per tensor or per channel (see QuantFormat)."""
        return False

    def modelopt(self, options: Any, placement: Placement) -> dict[str, Any] | None:
        """NVIDIA modelopt's quantizer attributes for this format at `placement` (None: modelopt
        has no form of it)."""
        return None

    def qdq_form(self, options: Any, weight: bool) -> QDQForm:
        """How ONNX's QDQ form stores this format on a weight or an activation, or why not."""
        return QDQForm.none(f"the {self.name} family declares none")


FORMATS: Registry[FormatFamily] = Registry("format")


def register_format(options: Any) -> Any:
    """Class decorator: register one instance of a FormatFamily under its `name`, with the
    pydantic model of its options."""

    def decorator(cls: type[FormatFamily]) -> type[FormatFamily]:
        family = cls()
        _probe_forms(family, options)
        FORMATS.register(cls.name, options=options)(family)
        return cls

    return decorator


def _probe_forms(family: FormatFamily, options: Any) -> None:
    """Ask a family for its QDQ forms under its default options (where every option has one)
    before it is registered: a form the writers could not write (a float8 element ONNX has no
    type for) is refused here, naming the family, not at its first export."""
    try:
        defaults = options()
    except Exception:  # noqa: BLE001 - options without defaults: the forms are checked when made
        return
    for weight in (True, False):
        try:
            family.qdq_form(defaults, weight)
        except UserError as error:
            raise UserError(f"format family '{family.name}': {error}") from None


@dataclass(frozen=True)
class QuantFormat:
    """A format family with its options (validated), hashable, spelt by `spelling`."""

    family: str
    settings: tuple[tuple[str, Any], ...] = ()

    @cached_property
    def entry(self) -> FormatFamily:
        return FORMATS.get(self.family).builder

    @cached_property
    def options(self) -> Any:
        return FORMATS.get(self.family).options(**dict(self.settings))

    @property
    def spelling(self) -> str:
        return self.entry.spelling(self.options)

    @property
    def bits(self) -> float:
        """Bits per element, scale overhead included."""
        return self.entry.bits(self.options)

    @property
    def element_bits(self) -> int:
        return self.entry.element_bits(self.options)

    @property
    def calibrated(self) -> bool:
        """Reads an amax: calibrated for inputs, max |w| for weights."""
        return self.entry.calibrated(self.options)

    @property
    def calibration_bits(self) -> int:
        return self.entry.calibration_bits(self.options)

    @property
    def classic(self) -> bool:
        """The integer format per tensor or per channel: today's TensorQuantizer, whose results
        stay bit-identical (quantization/quantizer.py runs it with cached parameters)."""
        return self.entry.classic(self.options)

    def quantize(
        self,
        x: Tensor,
        amax: Tensor | None,
        placement: Placement,
        bounds: tuple[float, float] | None = None,
    ) -> Tensor:
        """`x` fake-quantized, clamped to `bounds` (floor, ceiling) first where given."""
        entry = self.entry
        if bounds is None:
            return entry.quantize(x, self.options, amax, placement)
        if not entry.takes_bounds:
            return entry.quantize(x.clamp(*bounds), self.options, amax, placement)
        return entry.quantize(x, self.options, amax, placement, bounds=bounds)

    def modelopt(self, placement: Placement) -> dict[str, Any] | None:
        return self.entry.modelopt(self.options, placement)

    def qdq_form(self, weight: bool) -> QDQForm:
        return self.entry.qdq_form(self.options, weight)

    def __str__(self) -> str:
        return self.spelling


def make_format(family: str, **options: Any) -> QuantFormat:
    """A QuantFormat from a family name and options (validated; defaults left out of the key,
    so that `int8` spelt two ways is one format)."""
    entry = FORMATS.get(family)
    model = entry.options(**options)
    defaults = entry.options()
    settings = tuple(
        (name, value)
        for name, value in sorted(model.model_dump().items())
        if value != getattr(defaults, name)
    )
    return QuantFormat(family, settings)


@lru_cache(maxsize=32)
def integer_format(num_bits: int) -> QuantFormat:
    """The classic integer format of a bit width."""
    return make_format("int", num_bits=int(num_bits))


@lru_cache(maxsize=256)
def format_bits(spelling: str) -> float:
    """Bits per element of a format by its short name, scales counted."""
    return parse_format(spelling).bits


_BLOCK = re.compile(r"^(?P<stem>.+?)_b(?P<block>\d+)$")


def _parse_text(text: str) -> tuple[str, dict[str, Any]] | None:
    """(family, options) of a short name, or None."""
    stem, extra = text, {}
    match = _BLOCK.match(text)
    if match and not text.startswith("int"):
        stem, extra = match["stem"], {"block_size": int(match["block"])}
    for entry in FORMATS.entries():
        options = entry.builder.parse(stem)
        if options is not None:
            return entry.name, {**options, **extra}
    return None


_PARSED: dict[str, QuantFormat] = {}


def parse_format(value: Any, where: str = "format") -> QuantFormat:
    """A QuantFormat from its short name or a mapping with `format` and options; a name or an
    option that does not exist is one UserError naming `where`."""
    if isinstance(value, QuantFormat):
        return value
    if isinstance(value, str) and value in _PARSED:  # a search names the same few formats
        return _PARSED[value]
    family = ""
    try:
        if isinstance(value, Mapping):
            options = dict(value)
            family = options.pop("format", None)
            if not isinstance(family, str) or family not in FORMATS:  # noqa: SIM102
                raise UserError(
                    f"{where}: a format mapping needs `format:` naming one of "
                    f"{', '.join(FORMATS.names())}"
                    + (did_you_mean(str(family), FORMATS.names()) if family else "")
                )
            return make_format(family, **options)
        if isinstance(value, str):
            found = _parse_text(value.strip().lower())
            if found is not None:
                family = found[0]
                parsed = _PARSED[value] = make_format(family, **found[1])
                return parsed
        raise UserError(
            f"{where}: {value!r} is not a format; write one of {', '.join(FORMATS.names())} "
            f"(e.g. int8, int4_g128, fp8_e4m3, mxfp6_e2m3, mxfp4, nvfp4)"
            + (did_you_mean(value, example_spellings()) if isinstance(value, str) else "")
        )
    except ValidationError as error:
        raise UserError(f"{where}: {value!r}: {_option_problem(error, family)}") from None


def _option_problem(error: ValidationError, family: str) -> str:
    problem = error.errors()[0]
    key = ".".join(str(part) for part in problem["loc"])
    if problem["type"] == "extra_forbidden":
        known = ", ".join(FORMATS.get(family).options.model_fields) or "none"
        return f"{family} has no option '{key}' (its options: {known})"
    return f"{key} {problem['msg']}"


def example_spellings() -> list[str]:
    """Short names of every family with its default options and common variants."""
    return [
        "int8",
        "int4",
        "int4_g32",
        "int4_g64",
        "int4_g128",
        "int8_g128",
        # every other family at its default options (the integer one is spelled above)
        *[
            entry.builder.spelling(entry.options())
            for entry in FORMATS.entries()
            if entry.name != "int"
        ],
        "mxfp8_e5m2",
        "mxfp6_e3m2",
    ]
