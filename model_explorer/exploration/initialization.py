"""`exploration.initialization: auto`'s rule, in one place for the search that applies it and the
report that explains it (no torch: results are read without it)."""

from __future__ import annotations


def auto_takes_the_start(genes: int, first_members: int) -> bool:
    """Whether `auto` seeds the first population from the sensitivity start (where the problem
    can take one and the algorithm is not `random`): where the genome has more genes than the
    first population has members. Measured over five seeds (docs/performance-search.md): the start
    raised the final hypervolume with 28, 44 and 72 genes (populations of 16, 16, 12) and
    lowered it with 10 (16), where a random first population finds what its table would."""
    return genes > first_members
