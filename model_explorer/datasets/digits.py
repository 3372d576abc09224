"""scikit-learn's bundled 8x8 handwritten digits, split deterministically, optionally resized."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, TensorDataset

from model_explorer.datasets.spec import DatasetSpec, DigitsOptions

# Shares of the 1797 images in the train / validation / test splits (stratified by class).
SPLIT_FRACTIONS = {"train": 0.6, "validation": 0.2, "test": 0.2}


@lru_cache(maxsize=4)
def digits_split_indices(split_seed: int) -> dict[str, np.ndarray]:
    """Indices of each split into sklearn's digits arrays, stratified by class."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    labels = load_digits().target
    everything = np.arange(len(labels))
    test_share = SPLIT_FRACTIONS["test"]
    validation_share = SPLIT_FRACTIONS["validation"] / (1.0 - test_share)
    rest, test = train_test_split(
        everything, test_size=test_share, stratify=labels, random_state=split_seed
    )
    train, validation = train_test_split(
        rest, test_size=validation_share, stratify=labels[rest], random_state=split_seed
    )
    return {
        "train": np.sort(train),
        "validation": np.sort(validation),
        "test": np.sort(test),
        "all": everything,
    }


def digits_tensors(
    split: str = "test", resize: int = 8, channels: int = 1, split_seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Images (N, channels, resize, resize), standardised with the train split's mean and std,
    and integer labels."""
    from sklearn.datasets import load_digits

    data = load_digits()
    images = torch.from_numpy(data.images.astype(np.float32) / 16.0).unsqueeze(1)
    splits = digits_split_indices(split_seed)
    train = images[torch.from_numpy(splits["train"])]
    mean, std = train.mean(), train.std()
    chosen = torch.from_numpy(splits[split])
    x = (images[chosen] - mean) / std
    if resize != 8:
        x = F.interpolate(x, size=(resize, resize), mode="bilinear", align_corners=False)
    if channels == 3:
        x = x.expand(-1, 3, -1, -1).contiguous()
    y = torch.from_numpy(data.target[splits[split]].astype(np.int64))
    return x, y


def digits(spec: DatasetSpec, where: str) -> Dataset:
    options: DigitsOptions = spec.options
    return TensorDataset(
        *digits_tensors(options.split, options.resize, options.channels, options.split_seed)
    )
