"""NVIDIA Model Optimizer's AutoQuantize as a peer of the search benchmark, on the CPU.

`propose` runs `modelopt.torch.quantization.auto_quantize` (gradient method) once on a copy of
the float model: it calibrates every candidate format with modelopt's max calibration and
scores each layer's sensitivity to each format from the loss gradient at the layer's output
(cross entropy on labelled calibration batches, or for a label-free metric such as cosine a loss
against the float model's outputs: see peer_result.Scoring). For every budget,
`modelopt.torch.quantization.get_auto_quantize_config` then solves modelopt's integer program
over those scores for that effective-bits constraint, without touching the model again. Each
per-layer choice is mapped back to one input and one weight bit width of the benchmark's genome.

    from peer_modelopt import available, propose
"""

from __future__ import annotations

import contextlib
import copy
import io
import itertools
import logging
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from peer_result import Gene, PeerResult, Scoring
from torch import nn

Batch = tuple[torch.Tensor, torch.Tensor]

DEFAULT_LEVELS = (8, 6, 4, 3, 2)
ROLES = {"input": "input_quantizer", "weight": "weight_quantizer"}


def available() -> str | None:
    """None when modelopt's quantization package imports, else one line saying why not."""
    try:
        with _quiet():
            import modelopt.torch.quantization as mtq  # noqa: F401
    except Exception as error:  # noqa: BLE001 - any import failure makes the peer unavailable
        return f"nvidia-modelopt does not import: {type(error).__name__}: {error}".splitlines()[0]
    return None


def candidate_format(input_bits: int, weight_bits: int, cost: str = "mean") -> dict[str, Any]:
    """A modelopt quantize config of integer fake quantization: per-tensor input activations of
    `input_bits`, per-output-channel weights of `weight_bits`, max calibration.

    `cost` sets the recipe's effective bits, which AutoQuantize's constraint averages over the
    layers weighted by their weight elements: "mean" the mean of the two widths (the benchmark's
    cost counts input and weight bits alike), "weight" the weight width (modelopt's own meaning:
    a weight-memory constraint that leaves activations free), "min" modelopt's default heuristic
    (the smallest width of the format's quantizers).
    """
    quant_cfg = [
        {"quantizer_name": "*", "enable": False},
        {"quantizer_name": "*weight_quantizer", "cfg": {"num_bits": weight_bits, "axis": 0}},
        {"quantizer_name": "*input_quantizer", "cfg": {"num_bits": input_bits, "axis": None}},
    ]
    config: dict[str, Any] = {"quant_cfg": quant_cfg, "algorithm": "max"}
    if cost == "mean":
        config["effective_bits"] = (input_bits + weight_bits) / 2
    elif cost == "weight":
        config["effective_bits"] = float(weight_bits)
    elif cost != "min":
        raise ValueError(f"unknown cost {cost!r}: use 'mean', 'weight' or 'min'")
    return config


def candidate_pairs(
    genes: Sequence[Gene], levels: Sequence[int] = DEFAULT_LEVELS
) -> list[tuple[int, int]]:
    """(input bits, weight bits) of the candidate formats: a chain from the genes' overall upper
    bound down through `levels` inside their bounds, the weight width lowered first at each
    step ((8, 8), (8, 6), (6, 6), (6, 4), (4, 4), ...).

    A chain, not every pair: AutoQuantize orders a layer's formats by effective bits and caps
    each format's score at the scores of the cheaper ones (it assumes that a format with more
    bits never hurts more). Along a chain, where each format has at least the bits of the
    cheaper ones in both quantizers, that holds; across a grid it does not (the score of
    (2, 8) would be capped at that of (4, 4)) and the solver would pick formats at scores they
    do not have."""
    low = min(gene[2] for gene in genes)
    high = max(gene[3] for gene in genes)
    widths = sorted({b for b in levels if low <= b <= high} | {high}, reverse=True)
    chain = [(widths[0], widths[0])]
    for wider, narrower in itertools.pairwise(widths):
        chain += [(wider, narrower), (narrower, narrower)]
    return chain


def propose(
    float_model: nn.Module,
    calibration: Sequence[Batch],
    evaluation: Sequence[Batch],
    genes: Sequence[Gene],
    budgets: Sequence[float],
    seed: int,
    *,
    scoring: Scoring | None = None,
    levels: Sequence[int] = DEFAULT_LEVELS,
    pairs: Sequence[tuple[int, int]] | None = None,
    cost: str = "mean",
    allow_no_quant: bool = False,
    reuse_scores: bool = True,
    calib_batches: int | None = None,
    score_batches: int | None = None,
    held_out: Sequence[Batch] | None = None,
) -> PeerResult:
    """AutoQuantize's per-layer formats for each effective-bits budget, as genomes.

    Steps: deep-copy the model to the CPU (in-place activations made out of place), run
    `mtq.auto_quantize` with the candidate formats, `scoring`'s loss and every layer
    the genes name in its search space (other Conv/Linear layers disabled); rescale the scores
    of the returned search state (see `_rescaled`); for each budget, `mtq.get_auto_quantize_config`
    re-solves modelopt's program and its per-quantizer `num_bits` become the genome.

    Args:
        float_model: the trained float model; a deep copy is quantized, it is left as it is.
        calibration: (inputs, targets) batches for modelopt's calibration and for its
            gradient scores (`scoring.loss` against the targets: labels, or the float model's
            outputs for a label-free metric).
        evaluation: the benchmark's evaluation batches. AutoQuantize evaluates no candidate;
            each proposal is scored here afterwards with modelopt's own quantizers (the
            format's quantize config on a fresh copy, max-calibrated on the calibration
            batches), not counted in what the search spent.
        genes: in genome order, (layer name in `float_model`, 'input' or 'weight', lowest bits,
            highest bits).
        budgets: effective-bits constraints (`constraints={"effective_bits": b}`), one genome
            each, in this order.
        seed: seeds torch (in a forked RNG state) for the search; AutoQuantize itself draws no
            random numbers.
        scoring: the workload's metric, whose `loss` AutoQuantize's gradients follow (top-1:
            cross entropy, by default).
        levels: bit widths of the default chain of formats, see `candidate_pairs`.
        pairs: (input bits, weight bits) of the candidate formats instead of that chain.
        cost: what a format's effective bits are, see `candidate_format`.
        allow_no_quant: let AutoQuantize leave a layer unquantized (16 bits in its cost; the
            genes' upper bounds in the genome); by default every layer takes one of the formats.
        reuse_scores: score once and re-solve for every budget (`get_auto_quantize_config`);
            False runs AutoQuantize from scratch for every budget (and counts every run).
        calib_batches: calibration batches per candidate format (all by default).
        score_batches: batches of gradient scoring (all by default).
        held_out: (inputs, targets) batches no selection sees, where each proposal is
            scored with modelopt's quantizers too.

    Returns:
        A PeerResult with one genome per budget, and each one's score with modelopt's own
        quantizers.
    """
    start = time.perf_counter()
    batches = [_with_targets(batch) for batch in calibration]
    if not batches:
        raise ValueError("calibration: AutoQuantize needs at least one (inputs, targets) batch")
    scoring = scoring or Scoring("top1")
    calib_steps = min(calib_batches or len(batches), len(batches))
    score_steps = min(score_batches or len(batches), len(batches))
    pairs = list(pairs) if pairs is not None else candidate_pairs(genes, levels)
    formats = [candidate_format(a, w, cost) for a, w in pairs]
    layers = list(dict.fromkeys(gene[0] for gene in genes))
    search_spaces = [
        {
            "module_name_patterns": layers,
            "quantization_formats": formats,
            "allow_no_quant": allow_no_quant,
        }
    ]
    run = _Run(
        batches,
        formats,
        search_spaces,
        _unsearched_layers(float_model, layers),
        lambda output, batch: scoring.loss(output, batch[1]),
    )
    genomes: list[list[int]] = []
    reached: list[float] = []
    own: list[tuple[float, float | None]] = []
    state: dict[str, Any] | None = None
    for budget in budgets:
        if state is None or not reuse_scores:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                state = _rescaled(run(float_model, budget, calib_steps, score_steps))
        config = _solve(state, budget)
        genome = genome_of(config, genes)
        genomes.append(genome)
        reached.append(effective_bits(float_model, genes, genome, cost))
        quantized = _quantized(float_model, config, batches[:calib_steps])
        own.append(
            (
                scoring.value(quantized, evaluation),
                scoring.value(quantized, held_out) if held_out else None,
            )
        )

    notes = (
        f"modelopt {_version()} auto_quantize (gradient), {len(formats)} integer formats "
        f"(input bits, weight bits) {pairs}: per-tensor signed inputs, per-output-channel "
        f"weights, max calibration; a format's effective bits = {_COST_WORDS[cost]}, the "
        "constraint their mean over layers weighted by weight elements; "
        f"{'no-quant allowed' if allow_no_quant else 'every searched layer quantized'}; "
        f"scores: {_LOSS_WORDS[scoring.label_free]} ({scoring.name}) on {run.scored // run.runs} "
        "calibration samples, "
        f"{'scored once and re-solved per budget' if reuse_scores else 'one run per budget'} "
        "(scores rescaled to a largest of 1e6 before solving: CBC ignores differences of "
        f"~1e-7); effective bits reached {[round(b, 3) for b in reached]}. Forwards "
        f"({run.runs} run{'s' if run.runs > 1 else ''}): {run.calibrated} calibration samples "
        f"forwarded ({len(formats)} formats x {run.calibrated // (run.runs * len(formats))}) "
        f"+ {run.scored} scoring samples x (2 for the forward and backward pass + "
        f"{len(formats)}: each layer re-run once per format, about one model forward per "
        "format). Subclasses of Conv and Linear registered with their base's quantized class. "
        "Mapping: one format per "
        "layer, so its input and weight genes move together along the chain; a layer left "
        "unquantized or outside modelopt's search gets its genes' upper bounds; widths outside "
        "a gene's bounds are clipped."
    )
    forwards = run.calibrated + run.scored * (2 + len(formats))
    return PeerResult(genomes, forwards, time.perf_counter() - start, notes, own)


def _quantized(float_model: nn.Module, config: dict[str, Any], batches: Sequence[Batch]):  # noqa: ANN202
    """A copy of the model quantized by modelopt with one proposal's quantize config, its
    amax calibrated on `batches` (the config's algorithm, max), as AutoQuantize's search
    quantized each layer's candidate format."""
    with _quiet():
        import modelopt.torch.quantization as mtq

        model = _working_copy(float_model)

        def calibrate(module: nn.Module) -> None:
            for inputs, _ in batches:
                module(inputs)

        with torch.no_grad():
            return mtq.quantize(model, config, forward_loop=calibrate).eval()


_LOSS_WORDS = {False: "cross entropy against labels", True: "loss to the float outputs"}
_COST_WORDS = {
    "mean": "mean of input and weight bits",
    "weight": "weight bits",
    "min": "smaller of input and weight bits (modelopt's default)",
}


def effective_bits(
    model: nn.Module, genes: Sequence[Gene], genome: Sequence[int], cost: str = "mean"
) -> float:
    """The genome's effective bits as AutoQuantize's constraint counts them: each layer's
    format bits (`cost`) averaged over the layers weighted by their weight elements (a layer
    AutoQuantize left unquantized counts its genome bits here, 16 bits there)."""
    bits: dict[str, dict[str, int]] = {}
    for (layer, role, _, _), width in zip(genes, genome, strict=True):
        bits.setdefault(layer, {})[role] = width
    total = weighted = 0.0
    for layer, widths in bits.items():
        size = model.get_submodule(layer).weight.numel()
        a, w = widths.get("input", 16), widths.get("weight", 16)
        format_bits = {"mean": (a + w) / 2, "weight": w, "min": min(a, w)}[cost]
        total += size
        weighted += size * format_bits
    return weighted / total if total else 0.0


def genome_of(config: dict[str, Any], genes: Sequence[Gene]) -> list[int]:
    """The genome of a flat modelopt quantize config (`get_auto_quantize_config`'s): each gene
    takes the `num_bits` of its layer's enabled quantizer, clipped to the gene's bounds, or the
    gene's upper bound when the quantizer is disabled or not named."""
    bits: dict[str, int | None] = {}
    for entry in config["quant_cfg"]:
        name = entry.get("quantizer_name", "")
        if "*" in name:
            continue
        cfg = entry.get("cfg")
        width = cfg.get("num_bits") if isinstance(cfg, dict) else None
        enabled = entry.get("enable", True) and isinstance(width, int)
        bits[name] = int(width) if enabled else None
    genome = []
    for layer, role, low, high in genes:
        found = bits.get(f"{layer}.{ROLES[role]}")
        genome.append(high if found is None else min(max(found, low), high))
    return genome


class _Run:
    """AutoQuantize searches of one setup on CPU copies of a model, counting the samples its
    forward step sees: `calibrated` without gradients (calibration), `scored` with them (the
    gradient scoring's forward and backward passes), `runs` the searches made."""

    def __init__(
        self,
        batches: list[Batch],
        formats: list[dict[str, Any]],
        search_spaces: list[dict[str, Any]],
        disabled: list[str],
        loss: Callable[[torch.Tensor, Batch], torch.Tensor],
    ) -> None:
        self.batches, self.formats = batches, formats
        self.search_spaces, self.disabled = search_spaces, disabled
        self.loss = loss  # AutoQuantize's loss_func(output, batch) for its gradient scores
        self.calibrated = self.scored = self.runs = 0

    def __call__(
        self, float_model: nn.Module, budget: float, calib_steps: int, score_steps: int
    ) -> dict[str, Any]:
        """The search state of `mtq.auto_quantize` on a copy of `float_model` at `budget`."""
        with _quiet():
            import modelopt.torch.quantization as mtq

            model = _working_copy(float_model)
            _, state = mtq.auto_quantize(
                model,
                constraints={"effective_bits": float(budget)},
                quantization_formats=self.formats,
                module_search_spaces=self.search_spaces,
                data_loader=self.batches,
                forward_step=self._forward,
                loss_func=self.loss,
                disabled_layers=self.disabled or None,
                num_calib_steps=calib_steps,
                num_score_steps=score_steps,
                verbose=False,
            )
        self.runs += 1
        return state

    def _forward(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        samples = len(batch[1])
        if torch.is_grad_enabled():
            self.scored += samples
        else:
            self.calibrated += samples
        return model(batch[0])


def _rescaled(state: dict[str, Any], largest: float = 1e6) -> dict[str, Any]:
    """A copy of the search state with every layer's scores scaled by one factor, the largest
    becoming `largest`. The program's solution does not change with the scale of its objective,
    but PuLP's CBC solves to absolute tolerances: on a small, well-trained model the scores
    (squared loss gradients x output changes) are 1e-12..1e-6, and at that scale CBC returns
    the first feasible selection it finds, the same for every budget."""
    rescaled = dict(state)
    stats = {name: dict(stat) for name, stat in state["candidate_stats"].items()}
    top = max((max(stat["scores"], default=0.0) for stat in stats.values()), default=0.0)
    if top > 0:
        for stat in stats.values():
            stat["scores"] = [score * largest / top for score in stat["scores"]]
    rescaled["candidate_stats"] = stats
    return rescaled


def _solve(state: dict[str, Any], budget: float) -> dict[str, Any]:
    """The flat quantize config of the search state re-solved for `budget` effective bits."""
    with _quiet():
        import modelopt.torch.quantization as mtq

        return mtq.get_auto_quantize_config(state, {"effective_bits": float(budget)})


def _version() -> str:
    with _quiet():
        import modelopt

    return str(getattr(modelopt, "__version__", "?"))


def _with_targets(batch: Any) -> Batch:
    """A calibration batch as (inputs, targets) on the CPU; bare tensors have no targets."""
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise TypeError(
            "calibration: AutoQuantize's gradient scores need (inputs, targets) batches"
        )
    inputs, targets = batch
    return inputs.to("cpu"), targets.to("cpu")


def _unsearched_layers(model: nn.Module, layers: Sequence[str]) -> list[str]:
    """Conv and Linear modules of `model` the genes do not name: modelopt leaves them float."""
    wanted = set(layers)
    return [
        name
        for name, module in model.named_modules()
        if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)) and name not in wanted
    ]


def _working_copy(float_model: nn.Module) -> nn.Module:
    """A CPU copy of the model in eval mode as modelopt quantizes it: in-place activations
    made out of place, subclassed layers registered with their base's quantized class."""
    model = _without_inplace(copy.deepcopy(float_model).to("cpu").eval())
    _register_subclasses(model)
    return model


def _register_subclasses(model: nn.Module) -> None:
    """Register each subclass of Conv1d/2d/3d or Linear in `model` that modelopt does not know
    with the quantized class of its base, as modelopt's documentation registers a custom module
    (`QuantModuleRegistry.register`): its registry takes a subclass only where it keeps its
    base's forward, so one with its own (EfficientNet-Lite's Conv2dStaticSamePadding, whose
    forward pads and calls F.conv2d with the module's weight) would be left float and outside
    the search."""
    from modelopt.torch.quantization.nn import QuantModuleRegistry

    for module in model.modules():
        kind = type(module)
        for base in (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear):
            if issubclass(kind, base) and kind is not base and kind not in QuantModuleRegistry:
                key = f"{kind.__module__}.{kind.__qualname__}"
                QuantModuleRegistry.register({kind: key})(QuantModuleRegistry.get(base))


def _without_inplace(model: nn.Module) -> nn.Module:
    """The model with its in-place activations (ReLU(inplace=True), ...) made out of place:
    AutoQuantize's full backward hooks on each layer forbid modifying the layer's output in
    place. The function computed is the same."""
    for module in model.modules():
        if isinstance(getattr(module, "inplace", None), bool):
            module.inplace = False
    return model


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silences modelopt's import and progress chatter (warnings, tqdm on stderr, prints)."""
    sink = io.StringIO()
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stdout(sink),
        contextlib.redirect_stderr(sink),
    ):
        warnings.simplefilter("ignore")
        previous = logging.root.manager.disable
        logging.disable(logging.WARNING)
        try:
            yield
        finally:
            logging.disable(previous)
