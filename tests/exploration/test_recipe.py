"""A ProblemRecipe's key: a hash of the whole recipe (every field counts), computed once
however often a runner or a worker reads it, and the same after the recipe travels to another
process (pickled)."""

from __future__ import annotations

import hashlib
import json
import pickle

import pytest

from model_explorer.exploration.runners import recipe as recipe_module
from model_explorer.exploration.runners.recipe import ProblemRecipe


def _recipe(**changes: object) -> ProblemRecipe:
    fields = {
        "workload": {"workload": {"model": {"type": "digits_cnn"}}},
        "minimum_accuracy": [0.9],
        "files": {"weights.pt": "ab12"},
        "root": "/somewhere",
        "builder": "package.module:function",
    }
    return ProblemRecipe(**{**fields, **changes})  # type: ignore[arg-type]


def test_the_key_hashes_every_field() -> None:
    recipe = _recipe()
    whole = {
        "workload": recipe.workload,
        "minimum_accuracy": recipe.minimum_accuracy,
        "files": recipe.files,
        "root": recipe.root,
        "builder": recipe.builder,
    }
    text = json.dumps(whole, sort_keys=True)
    assert recipe.key == hashlib.sha256(text.encode()).hexdigest()[:16]
    others = [
        _recipe(workload={"workload": {}}),
        _recipe(minimum_accuracy=[0.8]),
        _recipe(files={}),
        _recipe(root="/elsewhere"),
        _recipe(builder="other:function"),
    ]
    assert len({recipe.key, *(other.key for other in others)}) == 6


def test_the_key_is_computed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    dumps = json.dumps

    def counted(*args: object, **kwargs: object) -> str:
        calls.append(1)
        return dumps(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(recipe_module.json, "dumps", counted)
    recipe = _recipe()
    keys = {recipe.key for _ in range(100)}
    assert len(keys) == 1 and len(calls) == 1
    assert pickle.loads(pickle.dumps(recipe)).key == recipe.key
