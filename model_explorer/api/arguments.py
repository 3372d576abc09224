"""The Python API's arguments checked where they enter, each wrong one a UserError naming the
argument as the caller wrote it (`search(bits=(8, 2))`), not the workload key it becomes;
and the caller's model called on the first batch of each data argument before anything else
runs, so that a batch the model cannot take is one sentence naming the argument, the call
made, and `forward_step`."""

from __future__ import annotations

import numbers
import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

from model_explorer.errors import UserError, first_line

# The workload's dataset roles by the argument of `search` that gives them.
ARGUMENTS = {"exploration": "data", "calibrate": "calibration", "reevaluate": "held_out"}


def _said(function: str, name: str, value: Any, what: str) -> UserError:
    if isinstance(value, torch.Tensor):
        shown = f"<tensor of shape {list(value.shape)}>"
    else:
        shown = " ".join(repr(value).split())
        shown = shown if len(shown) <= 60 else f"{shown[:57]}..."
    return UserError(f"{function}({name}={shown}): {what}")


def check_batches(function: str, name: str, value: Any, optional: bool = False) -> None:
    """An iterable of batches (a DataLoader, a list of `(inputs, targets)`)."""
    if value is None and optional:
        return
    if isinstance(value, (torch.Tensor, str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise _said(
            function,
            name,
            value,
            "expected an iterable of batches, e.g. a DataLoader or a list of (inputs, "
            "targets); a tensor of samples becomes one with "
            "DataLoader(TensorDataset(inputs, targets), batch_size=...)",
        )


def check_names(function: str, name: str, value: Any, optional: bool = False) -> None:
    """A non-empty sequence of strings (not one string)."""
    if value is None and optional:
        return
    if (
        isinstance(value, (str, bytes))
        or not isinstance(value, Sequence)
        or not value
        or not all(isinstance(item, str) for item in value)
    ):
        raise _said(function, name, value, "expected a list of names, e.g. ['int8', 'fp8_e4m3']")


def check_bits(function: str, bits: Any, formats: Any) -> tuple[int, int] | None:
    """`bits` as (lowest, highest) widths, None where `formats` choose instead."""
    from model_explorer.formats.integer import MAX_BITS, MIN_BITS

    if bits is None:
        return None if formats is not None else (2, 8)
    if formats is not None:
        raise _said(
            function,
            "bits",
            bits,
            "the genes choose among `formats`, so bits has no effect; pass one of the two",
        )
    whole = (
        isinstance(bits, Sequence)
        and len(bits) == 2
        and all(isinstance(b, numbers.Integral) and not isinstance(b, bool) for b in bits)
    )
    if not whole:
        raise _said(function, "bits", bits, "expected (lowest, highest) widths, e.g. bits=(2, 8)")
    low, high = int(bits[0]), int(bits[1])
    if not MIN_BITS <= low <= high <= MAX_BITS:
        raise _said(
            function,
            "bits",
            bits,
            f"expected the lowest width first, both from {MIN_BITS} to {MAX_BITS}, "
            "e.g. bits=(2, 8)",
        )
    return low, high


def check_search(arguments: Mapping[str, Any]) -> None:
    """Every argument of `model_explorer.search` but the model (check_module) and the bits
    (check_bits), as the caller gave them."""
    f = "search"
    check_batches(f, "data", arguments["data"])
    check_batches(f, "calibration", arguments["calibration"], optional=True)
    check_batches(f, "held_out", arguments["held_out"], optional=True)
    check_names(f, "objectives", arguments["objectives"])
    check_names(f, "formats", arguments["formats"], optional=True)
    maximize = arguments["maximize"]
    if maximize is not None and not isinstance(maximize, bool):
        raise _said(f, "maximize", maximize, "expected True, False or None")
    budget = arguments["budget"]
    if budget is not None and not (
        isinstance(budget, Mapping)
        and all(
            isinstance(k, str) and isinstance(v, numbers.Real) and not isinstance(v, bool)
            for k, v in budget.items()
        )
    ):
        raise _said(
            f, "budget", budget, "expected limits by cost, e.g. budget={'weighted_bits': 120}"
        )
    seed = arguments["seed"]
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool) or seed < 0:
        raise _said(f, "seed", seed, "expected a whole number from 0")
    output = arguments["output"]
    if output is not None and not isinstance(output, (str, os.PathLike)):
        raise _said(f, "output", output, "expected a path (a str or a pathlib.Path)")
    settings = arguments["settings"]
    if settings is not None and not isinstance(settings, Mapping):
        raise _said(
            f,
            "settings",
            settings,
            "expected workload settings laid out as under `workload:`, e.g. "
            "{'exploration': {'nsga': {'generations': 5}}}",
        )
    if not isinstance(arguments["resume"], bool):
        raise _said(f, "resume", arguments["resume"], "expected True or False")
    if arguments["progress"] is not None and not isinstance(arguments["progress"], bool):
        raise _said(f, "progress", arguments["progress"], "expected True, False or None")
    step = arguments["forward_step"]
    if step is not None and not callable(step):
        raise _said(f, "forward_step", step, "expected a function forward_step(model, batch)")


def _call(inputs: Any, keys: list[str] | None, stepped: bool) -> str:
    if stepped:
        return "forward_step(model, batch)"
    if keys is not None:
        return f"model(**batch) with keys {keys}"
    if isinstance(inputs, (tuple, list)):
        return f"model(*batch) with {len(inputs)} tensors"
    return "model(inputs)"


def _run_either(model: torch.nn.Module, head: Any, whole: Any) -> None:
    """`model` on two samples, else on the whole batch (its error then raised)."""
    from model_explorer.modules import run_on

    with torch.inference_mode():
        try:
            run_on(model, head)
        except UserError:
            raise
        except Exception:  # noqa: BLE001 - a model made for its batch size: the whole batch
            device = next((p.device for p in model.parameters()), torch.device("cpu"))
            if isinstance(whole, torch.Tensor):
                run_on(model, whole.to(device))
            else:
                moved = (x.to(device) if isinstance(x, torch.Tensor) else x for x in whole)
                run_on(model, tuple(moved))


def check_first_calls(
    model: torch.nn.Module,
    first: Mapping[str, Any],
    keys: list[str] | None,
    forward_step: Callable | None,
    raw: Mapping[str, Any],
) -> None:
    """`model` (the caller's, called as the batches need) on the first batch of each role:
    two of its samples, and the whole batch where the model refuses two (one made for a batch
    size of its own); a failure is one sentence naming the argument that gave the batch, what
    was called, and what to do (`first`: each role's (two samples, whole batch); `raw`: each
    role's first batch as the caller's iterable yielded it)."""
    for role, (head, whole) in first.items():
        try:
            _run_either(model, head, whole)
        except UserError:
            raise
        except Exception as error:  # the model's own error, whatever it is
            inputs = whole
            name = ARGUMENTS.get(role, role)
            call = _call(inputs, keys, forward_step is not None)
            batch = raw[role]
            if forward_step is not None:
                advice = "check what forward_step does with one batch"
            elif isinstance(batch, (tuple, list)) and len(batch) > 2:
                advice = (
                    f"its batches are tuples of {len(batch)}, taken as the model's inputs: "
                    "yield (inputs, targets) pairs (e.g. ((x, y) for x, y, *_ in loader)), or "
                    "pass forward_step=lambda model, batch: ... to call the model yourself"
                )
            else:
                advice = (
                    "pass forward_step=lambda model, batch: ... to call the model as your own "
                    "code does (e.g. model(batch) for a model that takes the dict itself)"
                )
            raise UserError(
                f"search({name}=...): {call} failed on the first batch with "
                f"{type(error).__name__}: {first_line(error)}; {advice}"
            ) from error


def seeded(iterable: Iterable[Any], seed: int, where: str) -> list[Any]:
    """The caller's batches, read once, any shuffle or random transform that draws from torch's
    global generator drawn from `seed` (a DataLoader with shuffle=True, its workers' seeds):
    the same call on the same objects reads the same batches, for the same result. A DataLoader
    that shuffles with a generator of its own is said in one warning (`where`: the argument)."""
    from torch.utils.data import RandomSampler

    sampler = getattr(iterable, "sampler", None)
    if isinstance(sampler, RandomSampler) and getattr(sampler, "generator", None) is not None:
        warnings.warn(
            f"{where}: the DataLoader shuffles with a generator of its own, so each call reads "
            "its batches in another order and may give another result; pass shuffle=False, "
            "or seed its generator before each call",
            UserWarning,
            stacklevel=4,
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return list(iterable)
