"""How much of a forward pass a search could skip by reusing activations across candidates:
the layers at the front of the network on which a candidate's plan equals the previous
candidate's, with each generation's candidates evaluated in the order that shares the most
(sorted by their plans, layer by layer), in the plan's layer order (the model's modules).

    python benchmarks/bench_shared_prefix.py RESULT.pkl [RESULT.pkl ...]

Reads result files only (no model is run). Prints, per file, the mean number of leading layers
shared and how many candidates share 0, 1, 2, ... of them.
"""

from __future__ import annotations

import argparse
import collections

from model_explorer.results.result import ExplorationResult


def layer_keys(individual, layers: list[str]) -> list[tuple]:  # noqa: ANN001
    return [tuple(sorted(individual.plan[layer].items())) for layer in layers]


def shared_prefixes(result: ExplorationResult) -> list[int]:
    """For every evaluated candidate, the leading layers whose plan equals the candidate's
    before it (the last one of the previous generation for a generation's first)."""
    layers = list(result.individuals[0].plan)
    generations = collections.defaultdict(list)
    for individual in result.individuals:
        generations[individual.generation].append(layer_keys(individual, layers))
    shared, previous = [], None
    for generation in sorted(generations):
        for keys in sorted(generations[generation]):
            count = 0
            for mine, theirs in zip(keys, previous or [], strict=False):
                if mine != theirs:
                    break
                count += 1
            shared.append(count)
            previous = keys
    return shared


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+")
    for path in parser.parse_args().results:
        result = ExplorationResult.load(path)
        shared = shared_prefixes(result)
        layers = len(result.individuals[0].plan)
        counts = sorted(collections.Counter(shared).items())
        print(
            f"{path}: {len(shared)} candidates over {layers} layers; leading layers shared with "
            f"the candidate before: mean {sum(shared) / len(shared):.2f}; "
            + ", ".join(f"{n} layers: {c}" for n, c in counts)
        )


if __name__ == "__main__":
    main()
