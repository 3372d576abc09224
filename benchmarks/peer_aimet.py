"""AIMET's Automatic Mixed Precision (aimet-torch, `choose_mixed_precision`) as a peer of the
project's search: it proposes per-layer bit widths for a float model, which the caller then
scores in its own problem.

AIMET runs on the CPU through its public API: the model is prepared (`prepare_model`), wrapped
in a `QuantizationSimModel` and calibrated; phase 1 measures the accuracy of each quantizer
group alone at each (activation bits, parameter bits) candidate below the best uniform one;
phase 2 quantizes the groups cumulatively, least sensitive first, and evaluates every point of
that curve (brute-force search with no accuracy limit, so that the whole Pareto curve of
accuracy against relative BOPs is built). Every point of the curve becomes one genome of ours.

aimet-torch is not a project dependency: install it into a separate environment layered over the
project's (see the Makefile's LiteRT one), e.g.

    python3 -m venv /tmp/peers/aimet/venv
    echo "import site; site.addsitedir('$PWD/.venv/lib/python3.11/site-packages')" \\
        > /tmp/peers/aimet/venv/lib/python3.11/site-packages/model_explorer_base.pth
    /tmp/peers/aimet/venv/bin/pip install -c constraints.txt aimet-torch==2.42.0

and run the caller with that environment's python. `available()` says whether it imports.
"""

from __future__ import annotations

import copy
import json
import logging
import pickle
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from peer_result import Gene, PeerResult, Scoring

from model_explorer.fileio import atomic_path

# AIMET's encoding schemes by the names the benchmark takes: min-max (aimet-torch 2's default
# for QuantizationSimModel) and TF-enhanced, the one its documentation recommends for
# activations (an SQNR search over candidate ranges of each tensor's histogram)
SCHEMES = {"min_max": "min_max", "tf_enhanced": "post_training_tf_enhanced"}

# a quantizer as AIMET's quantizer groups name it: ('input', '<module>_input_quantizer_idx_0'),
# ('output', '<module>') or ('weight', '<module>')
QuantizerKey = tuple[str, str]


def available() -> str | None:
    """None if aimet-torch's mixed precision imports, else one line saying why not."""
    try:
        from aimet_torch.mixed_precision import choose_mixed_precision  # noqa: F401
    except Exception as error:  # any failure to import makes the peer unavailable
        message = str(error).splitlines()[0] if str(error) else ""
        return f"aimet-torch does not import: {type(error).__name__}: {message}"
    return None


def candidates(size: int, low: int, high: int) -> list[tuple[int, int]]:
    """AIMET's (activation bits, parameter bits) candidates of one of three sizes, from levels
    spaced geometrically over the genes' bit range [low, high] (rounded): 4, the ladder of its
    documentation over three levels, e.g. (8, 8), (4, 8), (4, 4), (2, 4) for 2-8 bits; 9, every
    pair of three levels ({8, 4, 2} for 2-8, {10, 6, 4} for 4-10); 25, every pair of five
    ({8, 6, 4, 3, 2} for 2-8, {10, 8, 6, 5, 4} for 4-10)."""
    count = {4: 3, 9: 3, 25: 5}.get(size)
    if count is None:
        raise ValueError(f"AIMET candidate sets have 4, 9 or 25 candidates, not {size}")
    ratio = high / low
    levels = sorted({round(high / ratio ** (k / (count - 1))) for k in range(count)}, reverse=True)
    if size == 4:
        top, middle, bottom = levels[0], levels[len(levels) // 2], levels[-1]
        return list(dict.fromkeys([(top, top), (middle, top), (middle, middle), (bottom, middle)]))
    return [(a, w) for a in levels for w in levels]


class _SampleCounter:
    """Counts the samples of every forward pass through a module (a forward pre-hook)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.samples = 0
        self._handle = module.register_forward_pre_hook(self._count)

    def _count(self, _module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        first = args[0] if args else None
        if isinstance(first, torch.Tensor) and first.dim() > 0:
            self.samples += int(first.shape[0])

    def remove(self) -> None:
        self._handle.remove()


RECORDS = "model_explorer_records.json"


class _Records:
    """What a resumable run counted before this process, read from and written to
    `folder`/RECORDS after every evaluation: AIMET's cache skips the evaluations it holds, so
    these are the only account of their held-out scores, passes, samples and seconds. No
    folder: nothing is kept."""

    def __init__(self, folder: str | None) -> None:
        self.path = None if folder is None else Path(folder) / RECORDS
        data = json.loads(self.path.read_text()) if self.path and self.path.is_file() else {}
        zero = {"encodings": 0, "evaluations": 0, "held-out samples": 0}
        self.passes: dict[str, int] = data.get("passes", zero)
        self.phase2: list[tuple[float, float | None]] = [tuple(e) for e in data.get("phase2", [])]
        self.samples: int = data.get("samples", 0)
        self.seconds: float = data.get("seconds", 0.0)

    def save(self, samples: int, seconds: float) -> None:
        """Write the counts with this process's `samples` and `seconds` added."""
        if self.path is None:
            return
        data = {
            "passes": self.passes,
            "phase2": self.phase2,
            "samples": self.samples + samples,
            "seconds": self.seconds + seconds,
        }
        with atomic_path(self.path) as temporary:
            temporary.write_text(json.dumps(data))


def drop_unreadable_cache(folder: str) -> list[str]:
    """Remove the pickles of AIMET's cache in `folder` that do not load (a run killed while
    AIMET wrote one), so that a resumed run computes them again rather than failing; returns
    their names. The records keep the held-out scores of the points evaluated before."""
    dropped = []
    for path in sorted((Path(folder) / ".cache").glob("*.pkl")):
        try:
            with path.open("rb") as stream:
                pickle.load(stream)  # noqa: S301 - AIMET's own cache, written by this run
        except Exception:  # noqa: BLE001 - truncated or garbled: either way computed again
            path.unlink()
            dropped.append(path.name)
    return dropped


def _calibrate(model: torch.nn.Module, batches: Sequence[torch.Tensor]) -> None:
    """AIMET's forward-pass callback: every calibration batch once."""
    with torch.no_grad():
        for inputs in batches:
            model(inputs)


def _prepared(model: torch.nn.Module, prepare_model: Callable[..., Any]) -> tuple[Any, list[str]]:
    """The model AIMET quantizes, and what was done to get it: its eval-mode dropouts made
    identities (the same function; AIMET's quantizer groups cannot take a dropout's unset output
    quantizer), then `prepare_model`'s graph, or the model as it is where torch.fx cannot trace
    it (e.g. a Hugging Face BERT's shape-dependent slicing): QuantizationSimModel wraps its
    modules all the same, and its functional operations stay float."""
    notes = []
    dropouts = [
        (parent, name)
        for parent in model.modules()
        for name, child in parent.named_children()
        if isinstance(child, torch.nn.modules.dropout._DropoutNd)
    ]
    for parent, name in dropouts:
        setattr(parent, name, torch.nn.Identity())
    if dropouts:
        notes.append(f"{len(dropouts)} dropouts (identities in eval mode) made nn.Identity")
    try:
        return prepare_model(model), notes
    except Exception as error:  # noqa: BLE001 - any tracing failure: AIMET's unprepared flow
        reason = str(error).splitlines()[0][:120] if str(error) else ""
        notes.append(
            f"prepare_model failed ({type(error).__name__}: {reason}): the model unprepared, "
            "its functional operations (attention, residual adds, activations) unquantized"
        )
        return model, notes


def _quantize_embedding_outputs(sim: Any, bits: int) -> list[str]:
    """Embedding lookups whose output quantizer AIMET left unset get one (`bits`, asymmetric,
    as its default config quantizes op outputs): its quantizer-group search reads every
    producer's output quantizers and fails on an unset one."""
    from aimet_torch.quantization.affine import QuantizeDequantize

    named = []
    for name, module in sim.model.named_modules():
        outputs = getattr(module, "output_quantizers", None)
        if isinstance(module, torch.nn.Embedding) and outputs is not None and outputs[0] is None:
            outputs[0] = QuantizeDequantize((), bits, symmetric=False)
            named.append(name)
    if not named:
        return []
    return [f"output quantizers of {', '.join(named)} set at {bits} bits (AIMET left them unset)"]


def _feeding_quantizers(sim: Any, layers: Iterable[str]) -> dict[str, set[QuantizerKey]]:
    """For each layer, the enabled activation quantizers whose output reaches its input without
    passing through another one: its own input quantizer if enabled, else the output quantizer
    of the nearest producer upstream in AIMET's connected graph (through unquantized ReLUs,
    pools, flattens; all inputs of an unquantized multi-input op). Empty: the input is float."""
    named = dict(sim.model.named_modules())
    name_of = {id(module): name for name, module in named.items()}
    op_of = {
        name_of.get(id(op.get_module())): op
        for op in sim.connected_graph.ordered_ops
        if op.get_module() is not None
    }

    def enabled(quantizers: Any, index: int = 0) -> bool:
        return quantizers is not None and len(quantizers) > index and quantizers[index] is not None

    def upstream(op: Any, seen: set[int]) -> set[QuantizerKey]:
        found: set[QuantizerKey] = set()
        data_inputs = [p for p in op.inputs if p.producer is not None] or op.inputs[:1]
        for product in data_inputs:
            producer = product.producer
            if producer is None or id(producer) in seen:
                continue
            seen.add(id(producer))
            module = producer.get_module()
            name = name_of.get(id(module)) if module is not None else None
            if module is not None and enabled(getattr(module, "output_quantizers", None)):
                found.add(("output", name))
            else:
                found |= upstream(producer, seen)
        return found

    feeding: dict[str, set[QuantizerKey]] = {}
    for layer in layers:
        module = named[layer]
        if enabled(getattr(module, "input_quantizers", None)):
            feeding[layer] = {("input", f"{layer}_input_quantizer_idx_0")}
        elif layer in op_of:
            feeding[layer] = upstream(op_of[layer], set())
        else:
            feeding[layer] = set()
    return feeding


def _aimet_names(model: torch.nn.Module, layers: Iterable[str]) -> dict[str, str]:
    """Each of our layers' name in AIMET's model: its own, or, where AIMET's model preparer
    made the layer's functional convolution a child module of its own (a Conv2d subclass
    whose forward pads and calls F.conv2d, as EfficientNet-Lite's Conv2dStaticSamePadding
    does: `_blocks.0._depthwise_conv.module_conv2d_1`), that child's, the one module inside
    it with a weight quantizer."""
    named = dict(model.named_modules())

    def weighted(module: torch.nn.Module) -> bool:
        quantizers = getattr(module, "param_quantizers", None)  # a ModuleDict in AIMET
        return (
            quantizers is not None and "weight" in quantizers and quantizers["weight"] is not None
        )

    names = {}
    for layer in layers:
        inside = [
            name
            for name, module in named.items()
            if name.startswith(f"{layer}.") and weighted(module)
        ]
        own = layer in named and weighted(named[layer])
        names[layer] = inside[0] if not own and len(inside) == 1 else layer
    return names


def _group_keys(group: Any) -> set[QuantizerKey]:
    """The quantizers of one AIMET quantizer group, as (kind, name)."""
    return (
        {("input", name) for name in group.input_quantizers}
        | {("output", name) for name in group.output_quantizers}
        | {("weight", name) for name in group.parameter_quantizers}
    )


def _bits(candidate: Any) -> tuple[int, int | None]:
    """(activation bits, parameter bits or None) of an AIMET candidate with data types."""
    activation = int(candidate[0][0])
    parameter = int(candidate[1][0]) if len(candidate) > 1 and candidate[1] else None
    return activation, parameter


def _genome_builder(
    genes: Sequence[Gene],
    feeding: dict[str, set[QuantizerKey]],
    groups: Iterable[Any],
) -> tuple[Callable[[dict[Any, Any], tuple[int, int]], list[int]], list[str]]:
    """A function from {group: candidate} (missing groups at the baseline candidate) to a
    genome, and the notes on genes whose mapping is not one to one."""
    owner: dict[QuantizerKey, Any] = {}
    for group in groups:
        for key in _group_keys(group):
            owner[key] = group
    notes: list[str] = []
    sources: list[list[Any]] = []
    for layer, role, _, _ in genes:
        if role == "weight":
            group = owner.get(("weight", layer))
            if group is None:
                notes.append(f"{layer} weight: in no AIMET group (kept at the baseline)")
            elif len(group.parameter_quantizers) > 1:
                others = ", ".join(n for n in group.parameter_quantizers if n != layer)
                notes.append(f"{layer} weight: one AIMET group with the weight of {others}")
            sources.append([group])
            continue
        keys = sorted(feeding.get(layer, set()))
        found = [owner.get(key) for key in keys]
        if not keys:
            notes.append(f"{layer} input: no AIMET activation quantizer feeds it (baseline)")
        elif len(keys) > 1:
            notes.append(f"{layer} input: fed by {len(keys)} AIMET quantizers (lowest bits)")
        elif found[0] is not owner.get(("weight", layer)):
            notes.append(
                f"{layer} input: AIMET's {keys[0][0]} quantizer of '{keys[0][1]}' is in another "
                "group than this layer's weight"
            )
        sources.append(found)
    used = {id(group) for found in sources for group in found if group is not None}
    unused = [group for group in owner.values() if id(group) not in used]
    if unused:
        names = sorted({name for group in unused for _, name in _group_keys(group)})
        notes.append(
            f"{len({id(g) for g in unused})} AIMET groups hold no quantizer of ours (outputs of "
            f"{', '.join(names)}): curve points that move only them repeat a genome and are dropped"
        )

    def genome(state: dict[Any, Any], baseline: tuple[int, int]) -> list[int]:
        values = []
        for (_, role, low, high), groups_of_gene in zip(genes, sources, strict=True):
            bits = []
            for group in groups_of_gene:
                activation, parameter = (
                    _bits(state[group]) if group is not None and group in state else baseline
                )
                if role == "weight":
                    bits.append(parameter if parameter is not None else baseline[1])
                else:
                    bits.append(activation)
            chosen = min(bits) if bits else (baseline[0] if role == "input" else baseline[1])
            values.append(int(min(max(chosen, low), high)))
        return values

    return genome, notes


def held_out_of_points(
    scores: Sequence[float], evaluations: Sequence[tuple[float, float | None]]
) -> list[float | None]:
    """Each curve point's held-out score: the phase-2 evaluations come in curve order, each
    (score, held-out score), among others (the baseline's, the final one); a point takes the
    first evaluation after the previous point's whose score is its own. None where none is."""
    found: list[float | None] = []
    position = 0
    for score in scores:
        match = next(
            (i for i in range(position, len(evaluations)) if evaluations[i][0] == score), None
        )
        found.append(None if match is None else evaluations[match][1])
        position = position if match is None else match + 1
    return found


def propose(
    float_model: torch.nn.Module,
    calibration: list[torch.Tensor],
    evaluation: list[tuple[torch.Tensor, torch.Tensor]],
    genes: list[Gene],
    candidates: list[tuple[int, int]],
    seed: int,
    scoring: Scoring | None = None,
    fold_batch_norms: bool = False,
    results_dir: str | None = None,
    verbose: bool = False,
    quant_scheme: str = "min_max",
    held_out: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
    resume: bool = False,
) -> PeerResult:
    """Run AIMET's mixed precision on a copy of `float_model` and map its Pareto curve onto
    genomes.

    Args:
        float_model: the trained float model in eval mode (not modified).
        calibration: input batches AIMET computes its encodings on.
        evaluation: (inputs, targets) batches; AIMET's phase-1 and phase-2 callbacks return
            `scoring`'s score on all of them.
        genes: in genome order, (layer name, 'input' or 'weight', lowest bits, highest bits).
        candidates: AIMET's (activation bits, parameter bits) candidates.
        seed: seeds torch (AIMET's algorithm itself is deterministic).
        scoring: the workload's metric (top-1 accuracy against labels by default).
        fold_batch_norms: fold batch norms into the preceding layers first (AIMET's usual flow;
            off by default because the project quantizes the model's weights as given).
        results_dir: where AIMET writes its cache and plots (a temporary folder if None).
        verbose: keep AIMET's INFO logging (off: its loggers are set to WARNING, for good).
        quant_scheme: AIMET's encodings, a key of SCHEMES.
        held_out: (inputs, targets) batches no selection sees: each point of the curve is
            scored there too, with AIMET's own quantizers in the state phase 2 evaluated.
        resume: keep AIMET's cache and this run's own counts (RECORDS) in `results_dir` and
            take both up when run again on it: a run cut short continues where it stopped
            (AIMET's encodings are computed again, and counted again).

    Returns:
        One genome per distinct configuration on AIMET's curve, in curve order (each point
        moves one more quantizer group, cumulatively from the baseline candidate; a group's
        later move overrides its earlier one), what it cost, and per genome the score AIMET's
        own quantizers gave it on its curve (and on `held_out`).
    """
    from aimet_torch.common.amp.utils import AMPSearchAlgo
    from aimet_torch.common.defs import CallbackFunc, QuantizationDataType, QuantScheme
    from aimet_torch.mixed_precision import choose_mixed_precision
    from aimet_torch.model_preparer import prepare_model
    from aimet_torch.quantsim import QuantizationSimModel

    if not verbose:
        from aimet_torch.common.utils import AimetLogger

        AimetLogger.set_level_for_all_areas(logging.WARNING)
    torch.manual_seed(seed)
    start = time.perf_counter()
    model = copy.deepcopy(float_model).eval()
    dummy = calibration[0][:1]
    if fold_batch_norms:
        from aimet_torch.batch_norm_fold import fold_all_batch_norms

        fold_all_batch_norms(model, input_shapes=tuple(dummy.shape), dummy_input=dummy)
    prepared, preparation = _prepared(model, prepare_model)
    missing = sorted({layer for layer, *_ in genes} - dict(prepared.named_modules()).keys())
    if missing:
        raise ValueError(f"AIMET's prepared model lost the layer names {missing}")

    top = max(max(pair) for pair in candidates)
    sim = QuantizationSimModel(
        prepared,
        dummy_input=dummy,
        quant_scheme=QuantScheme[SCHEMES[quant_scheme]],
        default_output_bw=top,
        default_param_bw=top,
    )
    preparation += _quantize_embedding_outputs(sim, top)
    scoring = scoring or Scoring("top1")
    counter = _SampleCounter(sim.model)
    if resume and results_dir is None:
        raise ValueError("resume needs a results_dir to keep AIMET's cache and the counts in")
    if resume:
        Path(results_dir).mkdir(parents=True, exist_ok=True)
        for name in drop_unreadable_cache(results_dir):
            print(f"AIMET's cache {name} in {results_dir} did not load: computed again")
    records = _Records(results_dir if resume else None)
    passes = records.passes
    phase2 = records.phase2  # each phase-2 evaluation (of this run and those before), held out

    def save() -> None:
        records.save(counter.samples, time.perf_counter() - start)

    def calibrate_counted(module: torch.nn.Module, batches: Sequence[torch.Tensor]) -> None:
        passes["encodings"] += 1
        _calibrate(module, batches)
        save()

    def score_counted(module: torch.nn.Module, batches: Sequence[Any]) -> float:
        passes["evaluations"] += 1
        return scoring.score(module, batches)

    def evaluate_counted(module: torch.nn.Module, batches: Sequence[Any]) -> float:
        score = score_counted(module, batches)
        save()
        return score

    def evaluate_phase2(module: torch.nn.Module, batches: Sequence[Any]) -> float:
        score = score_counted(module, batches)
        held = None
        if held_out:
            held = scoring.value(module, held_out)
            passes["held-out samples"] += sum(int(targets.shape[0]) for _, targets in held_out)
        phase2.append((score, held))
        save()
        return score

    calibrate = CallbackFunc(calibrate_counted, calibration)
    evaluate = CallbackFunc(evaluate_counted, evaluation)
    sim.compute_encodings(calibrate.func, calibrate.args)
    typed = [
        ((int(a), QuantizationDataType.int), (int(w), QuantizationDataType.int))
        for a, w in candidates
    ]
    with tempfile.TemporaryDirectory(prefix="aimet_amp_") as scratch:
        pareto = choose_mixed_precision(
            sim,
            dummy,
            typed,
            eval_callback_for_phase1=evaluate,
            eval_callback_for_phase2=CallbackFunc(evaluate_phase2, evaluation),
            allowed_accuracy_drop=None,
            results_dir=results_dir or scratch,
            clean_start=not resume,
            forward_pass_callback=calibrate,
            amp_search_algo=AMPSearchAlgo.BruteForce,
        )
    counter.remove()
    pareto = list(pareto or [])

    # The baseline candidate (best uniform one) is the one no point of the curve moves to.
    moved_to = {_bits(candidate) for _, _, _, candidate in pareto}
    baseline = next(
        ((a, w) for a, w in candidates if (a, w) not in moved_to),
        tuple(candidates[0]),
    )
    groups = list(dict.fromkeys(group for _, _, group, _ in pareto))
    aimet_name = _aimet_names(sim.model, dict.fromkeys(layer for layer, *_ in genes))
    renamed = [(aimet_name[layer], *rest) for layer, *rest in genes]
    layers = list(dict.fromkeys(layer for layer, *_ in renamed))
    genome_of, mapping_notes = _genome_builder(renamed, _feeding_quantizers(sim, layers), groups)
    moved = sum(name != layer for layer, name in aimet_name.items())
    if moved:
        mapping_notes.insert(0, f"{moved} layers' convolutions are child modules in AIMET's model")

    genomes: list[list[int]] = []
    own: list[tuple[float, float | None]] = []
    seen: set[tuple[int, ...]] = set()
    state: dict[Any, Any] = {}
    helds = held_out_of_points([score for _, score, _, _ in pareto], phase2)
    for (_, score, group, candidate), held in zip(pareto, helds, strict=True):
        state[group] = candidate  # cumulative: a group's later entry overrides an earlier one
        genome = genome_of(state, baseline)
        if tuple(genome) not in seen:
            seen.add(tuple(genome))
            genomes.append(genome)
            own.append((scoring.sign * float(score), held))

    calibration_samples = sum(int(batch.shape[0]) for batch in calibration)
    evaluation_samples = sum(int(targets.shape[0]) for _, targets in evaluation)
    # the held-out samples are the benchmark's, not AIMET's
    spent = records.samples + counter.samples - passes["held-out samples"]
    other = (
        spent
        - calibration_samples * passes["encodings"]
        - evaluation_samples * passes["evaluations"]
    )
    notes = [
        f"aimet-torch choose_mixed_precision, {quant_scheme} encodings, "
        f"candidates {list(map(tuple, candidates))}, "
        f"baseline {baseline}, BruteForce phase 2 with no accuracy limit: {len(pareto)} curve "
        f"points over {len(groups)} quantizer groups, {len(genomes)} distinct genomes",
        *preparation,
        f"AIMET's evaluation callbacks score {scoring.name} on the benchmark's subset",
        "AIMET groups each weight with the activation quantizer feeding its layer and moves "
        "both to one (activation, parameter) candidate; its weights are per channel (default "
        f"config), encodings {quant_scheme} on the calibration batches",
        "input bits = bits of the AIMET quantizer feeding the layer (its own input quantizer, "
        "else the nearest upstream output quantizer, through ReLU/pool/flatten); clamped into "
        "[low, high]",
        *mapping_notes,
        f"forwards: {spent} samples through AIMET's sim model after its construction: "
        f"{passes['encodings']} encoding passes x {calibration_samples}, "
        f"{passes['evaluations']} evaluations x {evaluation_samples}, "
        f"{other} on the dummy input (its tracing before that not counted)",
    ]
    return PeerResult(
        genomes=genomes,
        forwards=spent,
        seconds=records.seconds + time.perf_counter() - start,
        notes="; ".join(notes),
        own=own,
    )
