"""The dataset roles of a workload: where in the file each command finds its data."""

from __future__ import annotations

# role -> (section, key under its `datasets:`); read by the workload and, without importing
# torch, by the command line's choices.
DATASET_ROLES = {
    "calibrate": ("calibration", "calibrate"),
    "exploration": ("exploration", "exploration"),
    "baseline": ("exploration", "baseline"),
    "train": ("retraining", "train"),
    "validation": ("retraining", "validation"),
    "reevaluate": ("reevaluation", "reevaluate"),
}
