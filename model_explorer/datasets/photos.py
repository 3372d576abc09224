"""Real photographs for ImageNet networks, offline: the natural images that ship inside
scikit-image (`skimage/data`: a cat, a coffee cup, a rocket, an astronaut, motorcycles, the
moon, ...) and scikit-learn (`load_sample_image`: a temple, a flower), cut deterministically into
square crops at three scales and nine positions, each also mirrored: some 800 distinct inputs,
made on demand (no crop is stored). A split takes whole photographs (five for calibration, five
held out for testing, ten for exploration), so no photograph is in two splits. No labels: the
inputs are scored against the float network (`agreement`, `agreement_top5`, `kl`)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from model_explorer.datasets.spec import DatasetSpec, PhotosOptions
from model_explorer.errors import UserError

# The photographs of skimage/data (synthetic test patterns, text and line art left out) and of
# scikit-learn, in the order the splits count them.
SKIMAGE = (
    "astronaut.png", "brick.png", "camera.png", "cell.png", "chelsea.png", "clock_motion.png",
    "coffee.png", "coins.png", "grass.png", "gravel.png", "hubble_deep_field.jpg", "ihc.png",
    "microaneurysms.png", "moon.png", "motorcycle_left.png", "motorcycle_right.png",
    "retina.jpg", "rocket.jpg",
)  # fmt: skip
SKLEARN = ("china.jpg", "flower.jpg")
# Whole photographs per split: every fourth for calibration; five others held out as `test`,
# objects and scenes (a held-out KL measured on textures alone would say little), the stereo
# pair of motorcycles kept together in `explore` with the rest.
SPLITS = {
    "calibrate": ("astronaut.png", "chelsea.png", "grass.png", "microaneurysms.png", "retina.jpg"),
    "test": ("camera.png", "coffee.png", "hubble_deep_field.jpg", "rocket.jpg", "china.jpg"),
}
# (share of the short side, positions per axis): the whole square along the long axis, then
# 3 x 3 grids of smaller squares.
SCALES = ((1.0, 3), (0.7, 3), (0.5, 3))
# Per preprocessing: (mean, std) on 0-255 pixels. `lite`: EfficientNet-Lite's own (TensorFlow's
# lite preprocessing, 127 and 128); `imagenet`: torchvision's.
NORMALISATION = {
    "lite": ((127.0, 127.0, 127.0), (128.0, 128.0, 128.0)),
    "imagenet": ((123.675, 116.28, 103.53), (58.395, 57.12, 57.375)),
}


@lru_cache(maxsize=1)
def photographs() -> tuple[tuple[str, np.ndarray], ...]:
    """(name, RGB uint8 array) of every photograph, in SKIMAGE + SKLEARN order."""
    try:
        import skimage.data
        from skimage import io
    except ImportError as error:
        raise UserError(
            "dataset type 'photos' reads the photographs inside scikit-image; install the "
            "extra: pip install 'model_explorer[photos]'"
        ) from error
    from sklearn.datasets import load_sample_image

    folder = Path(skimage.data.__file__).parent
    found = [(name, io.imread(folder / name)) for name in SKIMAGE]
    found += [(name, load_sample_image(name)) for name in SKLEARN]
    return tuple((name, _rgb(image)) for name, image in found)


def _rgb(image: np.ndarray) -> np.ndarray:
    if image.ndim == 2:
        image = np.stack([image] * 3, axis=-1)
    return np.ascontiguousarray(image[..., :3]).astype(np.uint8)


def split_of(name: str) -> str:
    """The split a photograph belongs to."""
    return next((split for split, names in SPLITS.items() if name in names), "explore")


def crops(split: str) -> list[tuple[int, int, int, int, bool]]:
    """(photo, top, left, side, mirrored) of every distinct crop of a split's photographs."""
    found = []
    for index, (name, image) in enumerate(photographs()):
        if split != "all" and split_of(name) != split:
            continue
        height, width = image.shape[:2]
        seen = set()
        for share, positions in SCALES:
            side = int(round(share * min(height, width)))
            for top in np.linspace(0, height - side, positions).round().astype(int):
                for left in np.linspace(0, width - side, positions).round().astype(int):
                    seen.add((index, int(top), int(left), side))
        found += [(*crop, mirrored) for crop in sorted(seen) for mirrored in (False, True)]
    return found


class Photos(Dataset):
    """The crops of one split, made on demand: (3, size, size) normalised, label 0."""

    def __init__(self, options: PhotosOptions) -> None:
        self.crops = crops(options.split)
        self.size = options.size
        mean, std = NORMALISATION[options.preprocessing]
        self.mean = torch.tensor(mean).view(3, 1, 1)
        self.std = torch.tensor(std).view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.crops)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        photo, top, left, side, mirrored = self.crops[index]
        image = photographs()[photo][1][top : top + side, left : left + side]
        pixels = torch.from_numpy(image.copy()).permute(2, 0, 1).float().unsqueeze(0)
        pixels = F.interpolate(
            pixels, size=(self.size, self.size), mode="bilinear", antialias=True
        )[0]
        if mirrored:
            pixels = pixels.flip(-1)
        return (pixels - self.mean) / self.std, torch.tensor(0)


def photos(spec: DatasetSpec, where: str) -> Dataset:
    return Photos(spec.options)
