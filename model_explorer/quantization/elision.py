"""Activations a candidate's quantizers take over, skipped while the candidate is scored.

An unsigned integer input quantizer clamps its levels to [0, amax]: Q(relu(x)) = Q(x) for every
x, and Q(relu6(x)) = Q(x) where amax <= 6 (values above amax become amax either way; an Inf or
NaN too). Any other quantizer takes the activation's clamp into its own pass: given `bounds`
(0, 6) or (0, Inf), its kernel clamps each value as it reads it (TensorQuantizer.bounds,
formats/kernels.py), the activation's values exactly, so that its Q(x) is Q(relu6(x)). Both
commute with reshaping views (the values moved about). Where a ReLU or ReLU6 call's output is
read by nothing but input quantizers (the inputs of quantized layers, dense, directly or
through views, with nothing else taking the activation), the call is a pass over the
activation that the quantizers make or take over: `ActivationElision.applied` skips those calls
while a search scores a candidate. A quantizer given bounds reads nothing else: its layer is
called once in the trace (a layer called twice would clamp its other input too). Only the sign
of zeros can differ (a negative value rounds to -0 where the activation gave +0), which no
product or sum tells apart, so scores are unchanged.

Max pooling commutes with both too, yet an activation before one is kept: torch's pooling
compares value by value, and on values the activation left signed it took 10% longer (1,222
against 1,117 us on 120x32x8x8 at one thread) than the ReLU it would spare (11 us).
Skipping costs some microseconds a forward pass (the calls counted, two hooks) and some 50 a
candidate, so nothing is skipped where the calls that qualify hold fewer than `smallest` values
a pass (SKIP_SMALLEST, 2**20: a pass over them some 70 us on one core).

Which calls feed only quantized layers is read from the model's dataflow: a torch.fx trace with
the transformed layers and the activations as leaves, once per model; a model fx cannot trace
keeps every activation, and so does a subclass of ReLU or ReLU6 (its forward may do more). A
module called more than once (a ReLU shared within a residual block) is skipped call by call,
its calls counted within each forward pass. Whether a call is skipped is decided per candidate,
when scoring starts, from the quantizers it then has: enabled, and no sparsifier in the layer,
which reads the activation's magnitudes; a quantizer of the integer format, unsigned and
symmetric, with amax above zero and (after a ReLU6) at most 6, clamps as the activation does,
any other is given the bounds for as long as the candidate is scored.

A skipped call whose input is a fresh tensor (a transformed layer's product, a batch norm's, a
sum: not the model's input, a parameter or a view) that it alone reads, and whose output one
layer reads, called once, hands that layer a tensor nothing else will read: its input quantizer
writes its result over it (`TensorQuantizer.overwrites`, the integer format's kernel), half the
memory a call touches on the activations that dominate a network's passes.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from model_explorer.formats.integer import ZERO_AMAX
from model_explorer.quantization.layers import Dense, TransformedLayer
from model_explorer.quantization.overwriting import hooked, sole_reader
from model_explorer.quantization.quantizer import TensorQuantizer, WeightQuantizer

log = logging.getLogger(__name__)

# The activations skipped, with the largest value each passes (its clamp from above).
ELIDABLE: dict[type[nn.Module], float] = {nn.ReLU: math.inf, nn.ReLU6: 6.0}
# The fewest values a forward pass's skipped calls hold for any to be skipped (see above).
SKIP_SMALLEST = 1 << 20


@dataclass
class Site:
    """One activation module: per call in a forward pass, the layers reading its output (None
    for a call something else reads too), whether the call is skipped, and the calls counted
    in the pass running (`live`: skipping, else counting only); `sizes`: each call's values in
    the first pass counted; `repeated`: the modules (by id) called more than once in the trace:
    a transformed layer among them is given no bounds."""

    module: nn.Module
    readers: list[list[TransformedLayer] | None]
    repeated: frozenset[int] = frozenset()
    # Per call, the one layer reading its output where its input is a fresh tensor read by the
    # call alone, with the module that made it (overwriting.py): skipped, the call hands that
    # layer a tensor nothing else reads.
    sole: list[tuple[TransformedLayer, nn.Module | None] | None] = field(default_factory=list)
    skipped: list[bool] = field(default_factory=list)
    # The quantizers given bounds while the calls are skipped, with their bounds.
    bounds: list[tuple[TensorQuantizer, tuple[float, float]]] = field(default_factory=list)
    # The quantizers that write over their input while the calls are skipped.
    overwriting: list[TensorQuantizer] = field(default_factory=list)
    count: int = 0
    live: bool = False
    sizes: list[int] = field(default_factory=list)

    def forward(self, x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        index = self.count
        self.count += 1
        if index == len(self.sizes):
            self.sizes.append(x.numel())
        if self.live and index < len(self.skipped) and self.skipped[index]:
            return x
        return type(self.module).forward(self.module, x, *args, **kwargs)


def dataflow(model: nn.Module) -> list[Site] | None:
    """The ReLU and ReLU6 modules of `model` with at least one call read only by transformed
    layers, as the sole argument of each (`_readers`); None where torch.fx cannot trace the
    model."""
    from torch import fx

    activations = tuple(ELIDABLE)

    class Leaves(fx.Tracer):
        def is_leaf_module(self, module: nn.Module, qualified_name: str) -> bool:
            if isinstance(module, (TransformedLayer, *activations)):
                return True
            return super().is_leaf_module(module, qualified_name)

    try:
        graph = Leaves().trace(model)
    except Exception as error:  # noqa: BLE001 - any failure to trace: nothing is skipped
        log.debug("activations kept: the model cannot be traced (%s)", error)
        return None
    calls: dict[nn.Module, list[Any]] = {}  # each activation's calls, by module
    hidden: set[int] = set()  # modules inside a leaf the trace called: their calls are unseen
    called: set[int] = set()
    repeated: set[int] = set()
    for node in graph.nodes:
        if node.op != "call_module":
            continue
        module = model.get_submodule(node.target)
        hidden.update(id(child) for child in module.modules() if child is not module)
        (repeated if id(module) in called else called).add(id(module))
        if type(module) in ELIDABLE:
            calls.setdefault(module, []).append(node)
    sites = []
    many = frozenset(repeated)
    for module, nodes in calls.items():
        if id(module) in hidden:
            continue  # called inside a leaf too: its calls cannot be counted from the trace
        readers = [_readers(model, node, module) for node in nodes]
        if any(entry is not None for entry in readers):
            sole = [sole_reader(model, node) for node in nodes]
            sites.append(Site(module, readers, many, sole))
    return sites


# Operations that commute with ReLU and ReLU6 and cost the same on the values left signed:
# reshaping views. A skipped activation's input may pass through them to the quantizers that
# clamp it (max pooling commutes too, but costs more than the activation: see above).
_PASSING_MODULES = (nn.Flatten, nn.Unflatten, nn.Identity)
_PASSING_FUNCTIONS = (torch.flatten, torch.reshape, torch.squeeze, torch.unsqueeze)
_PASSING_METHODS = (
    "view",
    "reshape",
    "flatten",
    "unflatten",
    "squeeze",
    "unsqueeze",
    "contiguous",
    "permute",
    "transpose",
)


def _readers(model: nn.Module, node: Any, module: nn.Module) -> list[TransformedLayer] | None:
    """The transformed layers reading one activation call's output, each as its only argument,
    directly or through operations that commute with the activation (`_passes`); None where
    anything else reads it, or where the activation works in place on a tensor something else
    reads (skipping it would hand that reader the values before it)."""
    if getattr(module, "inplace", False):
        source = node.args[0] if node.args else None
        if not hasattr(source, "users") or len(source.users) != 1:
            return None
    if len(node.args) != 1 or node.kwargs:
        return None
    layers: list[TransformedLayer] = []
    pending = [node]
    while pending:
        value = pending.pop()
        if not value.users:
            return None
        for user in value.users:
            if _shape_query(user):
                continue  # reads the shape only, which the activation keeps
            if user.op == "call_module" and user.args == (value,) and not user.kwargs:
                layer = model.get_submodule(user.target)
                if isinstance(layer, TransformedLayer):
                    layers.append(layer)
                    continue
            if not _passes(model, user, value):
                return None
            pending.append(user)
    return layers or None


def _shape_query(node: Any) -> bool:
    return node.op == "call_method" and node.target in ("size", "dim")


def _passes(model: nn.Module, user: Any, value: Any) -> bool:
    """Whether `user` hands `value`, its first argument, on through an operation that commutes
    with the activation, its other arguments numbers or the sizes of tensors."""
    from torch import fx

    if not user.args or user.args[0] is not value:
        return False
    others: list[Any] = []
    fx.node.map_arg((user.args[1:], user.kwargs), others.append)
    if not all(_shape_query(other) for other in others):
        return False
    if user.op == "call_module":
        return type(model.get_submodule(user.target)) in _PASSING_MODULES
    if user.op == "call_function":
        return user.target in _PASSING_FUNCTIONS
    return user.op == "call_method" and user.target in _PASSING_METHODS


# What `_taking_over` answers for a quantizer that cannot stand in for the activation.
KEPT = False


def _taking_over(
    layer: TransformedLayer, ceiling: float, once: bool
) -> tuple[float, float] | None | bool:
    """How the layer's input quantizer, as set now, stands in for an activation clamping to
    [0, `ceiling`]: None where it clamps so itself, else the bounds to give it where it is
    enabled and its layer called once (`once`), else KEPT; the product reading nothing else of
    the input."""
    quantizer = layer.input_quantizer
    if type(layer.sparsifier) is not Dense:
        return KEPT
    if not isinstance(quantizer, TensorQuantizer) or isinstance(quantizer, WeightQuantizer):
        return KEPT
    if quantizer.calibrating or not quantizer.enabled:
        return KEPT
    if _clamps(quantizer, ceiling):
        return None
    return (0.0, ceiling) if once else KEPT


def _clamps(quantizer: TensorQuantizer, ceiling: float) -> bool:
    """Whether the quantizer clamps to [0, amax] with amax <= `ceiling` (and above zero)."""
    if quantizer.asymmetric or quantizer._format is not None or not quantizer.unsigned:
        return False
    amax = quantizer.amax
    if amax is None:
        return False
    return bool(amax.min() > ZERO_AMAX) and bool(amax.max() <= ceiling)


def _decide(site: Site) -> None:
    """Which of the site's calls are skipped (`skipped`) and which quantizers then take bounds
    (`bounds`), from the quantizers' settings now."""
    ceiling = ELIDABLE[type(site.module)]
    site.skipped, site.bounds, site.overwriting = [], [], []
    for readers, sole in zip(site.readers, site.sole, strict=True):
        answers = [
            _taking_over(layer, ceiling, id(layer) not in site.repeated) for layer in readers or ()
        ]
        skipped = readers is not None and all(answer is not KEPT for answer in answers)
        site.skipped.append(skipped)
        if skipped:
            site.bounds += [
                (layer.input_quantizer, answer)
                for layer, answer in zip(readers, answers, strict=True)
                if isinstance(answer, tuple)
            ]
            if sole is not None and id(sole[0]) not in site.repeated:
                if not hooked(site.module, *sole):  # no hook keeps the tensor overwritten
                    site.overwriting.append(sole[0].input_quantizer)


def _bind(sites: list[Site]) -> None:
    """The bounds of every live site's skipped calls given to their quantizers, and leave to
    write over their input (`overwriting`), the others' taken back: a quantizer clamps or
    writes over its input only while the activation before it is skipped, which is once the
    trace is confirmed."""
    for site in sites:
        for quantizer, bounds in site.bounds:
            quantizer.bounds = bounds if site.live else None
        for quantizer in site.overwriting:
            quantizer.overwrites = site.live


class ActivationElision:
    """The skippable activation calls of one model (`dataflow`, traced on first use);
    `enabled` false runs every activation (the benchmarks' comparison); `smallest`: the fewest
    values the calls skipped in a forward pass hold for any to be skipped.

    The trace is checked against the model as it runs: the first forward pass counts each
    activation's calls and their values without skipping any, and skipping starts once they
    are the trace's (a forward taking another path than the one traced, such as an argument the
    trace saw as given and the data leaves out, keeps every activation from then on). Every
    later pass is counted too; one that disagrees raises, since its calls were skipped by the
    wrong index."""

    def __init__(self, model: nn.Module, smallest: int = SKIP_SMALLEST) -> None:
        self.model = model
        self.enabled = True
        self.smallest = smallest
        self._sites: list[Site] | None = None
        self._traced = False
        self.verified: bool | None = None  # None until a pass was counted

    @property
    def sites(self) -> list[Site]:
        if not self._traced:
            self._sites = dataflow(self.model)
            self._traced = True
        return self._sites or []

    @contextmanager
    def applied(self) -> Iterator[int]:
        """Skip, until the block ends, every call whose readers all stand in for the activation
        with their current settings (`_taking_over`), once the trace is confirmed (`verified`)
        and where those calls hold `smallest` values a pass or more; yields how many calls per
        forward pass are skipped (before the first pass is counted: would be). The readers
        that need bounds have them while calls are skipped."""
        sites = self.sites if self.enabled and self.verified is not False else []
        if self.verified and self._values(sites, every=True) < self.smallest:
            sites = []  # too few values even were every call skipped: no quantizer asked
        for site in sites:
            _decide(site)
        if self.verified and self._values(sites) < self.smallest:
            sites = []
        # The first pass counts them all.
        active = [site for site in sites if any(site.skipped) or self.verified is None]
        if not active:
            yield 0
            return
        for site in active:
            site.count, site.live = 0, bool(self.verified)
            site.module.forward = site.forward  # the instance's, over its class's
        _bind(active)
        hooks = [
            self.model.register_forward_pre_hook(lambda *_: self._start(active)),
            self.model.register_forward_hook(lambda *_: self._check(active)),
        ]
        try:
            yield sum(sum(site.skipped) for site in active)
        finally:
            for hook in hooks:
                hook.remove()
            for site in active:
                del site.module.forward
                site.live = False
            _bind(active)

    @staticmethod
    def _values(sites: list[Site], every: bool = False) -> int:
        """The values a forward pass's skipped calls hold (their first pass's); `every`: those
        of every call read by quantized layers alone, whatever their quantizers."""
        if every:
            pairs = ((site.sizes, [r is not None for r in site.readers]) for site in sites)
        else:
            pairs = ((site.sizes, site.skipped) for site in sites)
        return sum(n for sizes, chosen in pairs for n, c in zip(sizes, chosen, strict=False) if c)

    def _start(self, active: list[Site]) -> None:
        for site in active:
            site.count = 0

    def _check(self, active: list[Site]) -> None:
        """At the end of a forward pass: were the calls the trace's?"""
        agrees = all(site.count == len(site.readers) for site in active)
        if self.verified is None:
            self.verified = agrees
            large = self._values(active) >= self.smallest
            for site in active:
                site.live = agrees and large
            _bind(active)
            if not agrees:
                log.debug("activations kept: the forward pass did not make the traced calls")
        elif self.verified and not agrees:
            counts = {id(site.module): (site.count, len(site.readers)) for site in active}
            raise RuntimeError(
                f"activation calls (made, traced) per module {list(counts.values())} differ "
                "from the trace's while calls were skipped"
            )
