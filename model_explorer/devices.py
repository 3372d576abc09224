"""Device selection: `auto` picks CUDA when present; nothing else names a device."""

from __future__ import annotations

import torch

from model_explorer.errors import UserError


def resolve_device(name: str = "auto", gpu_id: int | None = None) -> torch.device:
    """The torch device for a workload's `device` (and the original tool's `problem.gpu_id`)."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", gpu_id or 0)
        return torch.device("cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(
                f"workload.device: '{name}' was asked for but this machine has no CUDA device; "
                "use 'auto' or 'cpu'"
            )
        index = device.index if device.index is not None else (gpu_id or 0)
        if index >= torch.cuda.device_count():
            raise UserError(
                f"workload.device: '{name}' does not exist, this machine has "
                f"{torch.cuda.device_count()} CUDA device(s)"
            )
        return torch.device("cuda", index)
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise UserError("workload.device: 'mps' is not available here; use 'auto' or 'cpu'")
    return device


def workload_device(workload) -> torch.device:  # noqa: ANN001 - avoids importing the schema here
    """The device a workload asks for."""
    return resolve_device(workload.device, workload.problem.gpu_id)
