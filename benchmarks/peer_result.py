"""What a peer search of the benchmark (peer_aimet.py, peer_modelopt.py) hands back, and the
genes it is asked about."""

from __future__ import annotations

from dataclasses import dataclass

# (layer name, role, lowest bits, highest bits); role is 'input' or 'weight'
Gene = tuple[str, str, int, int]


@dataclass
class PeerResult:
    """What a peer proposed and what it cost.

    Attributes:
        genomes: the configurations proposed, each a list of bit widths in gene order.
        forwards: the sample-forwards the peer spent on its own (its calibration, sensitivity
            phase and evaluations; how each peer counts them is in its `notes`).
        seconds: the wall-clock time of the whole proposal.
        notes: how the peer's choices were mapped onto the genes where that is not one to one,
            and how `forwards` was counted.
    """

    genomes: list[list[int]]
    forwards: int
    seconds: float
    notes: str
