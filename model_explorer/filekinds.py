"""What a file passed in the wrong place is, told by its first bytes, and which command takes
it: a result file handed to a command that reads workloads, a workload handed to one that reads
results, a checkpoint, an array file, an ONNX model. Used where a file turns out not to be what
the command reads, so that the sentence names what it is instead of the parser's complaint."""

from __future__ import annotations

from pathlib import Path

WORKLOAD = "a workload YAML (explore, calibrate, compare, diagnose ... take it)"
RESULT = "a result file of explore (report, evaluate-individual, export and --resume take it)"


def kind_of(path: Path) -> str | None:
    """What the file at `path` is, in words with the commands that take it (None: unknown or
    unreadable)."""
    try:
        with open(path, "rb") as stream:
            head = stream.read(512)
    except OSError:
        return None
    if head.startswith(b"\x80") and len(head) > 1 and 2 <= head[1] <= 5:
        return RESULT if path.suffix == ".pkl" else "a Python pickle"
    if head.startswith(b"PK\x03\x04"):
        if path.suffix == ".npz":
            return "a NumPy .npz archive (a dataset of type npz takes it)"
        return (
            "a PyTorch file or other zip archive (a checkpoint: model.weights; a calibration: "
            "calibration.file)"
        )
    if head.startswith(b"\x93NUMPY"):
        return "a NumPy .npy array"
    if head.startswith(b"\x89HDF"):
        return "an HDF5 file (a dataset of type hdf5 takes it)"
    if path.suffix == ".onnx":
        return "an ONNX model (evaluate-individual --backend and compare's runtimes run them)"
    if b"\x00" in head:
        return None
    text = head.decode("utf-8", errors="ignore")  # the 512 bytes may end inside a character
    if any(line.split("#")[0].strip() == "workload:" for line in text.splitlines()):
        return WORKLOAD
    return None
