"""Histograms of the inputs of every convolution and linear layer over all samples, saved as
PNG files. --analysis-args: the output folder (default histograms)."""

from pathlib import Path

import numpy as np


class Histograms:
    def __init__(self, args: str = "") -> None:
        self.folder = Path(args or "histograms")
        self.values = {}

    def _collect(self, name, input) -> None:
        self.values.setdefault(name, []).append(input["data"].ravel())

    def Conv2DPre(self, name, input) -> None:
        self._collect(name, input)

    def FullyConnectedPre(self, name, input) -> None:
        self._collect(name, input)

    def EndAnalysis(self) -> None:
        if not self.values:  # no sample ran (a refused input): no folder, nothing replaced
            return
        from model_explorer.figures import pyplot, save_figure

        plt = pyplot()
        self.folder.mkdir(parents=True, exist_ok=True)
        for name, parts in self.values.items():
            figure, axes = plt.subplots(figsize=(5, 3))
            axes.hist(np.concatenate(parts), bins=100, log=True)
            axes.set_title(name, fontsize=8)
            file = self.folder / (name.replace("/", "_").replace("#", "_") + ".png")
            save_figure(figure, file, dpi=100, close=True)
