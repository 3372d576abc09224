"""An analysis in dalgona's earlier convention, for the tests: `DefaultOpPost(name, opcode,
inputs, output)` with one output dict. Like a feature-map dump of a fake-quantized Circle
model, it saves the values of every Dequantize operator whose name is a listed tensor's name
with the fake-quantization suffix, one folder per record; it also lists every operator its
hook was called for."""

from pathlib import Path

import numpy as np

SUFFIX = "_FQ_Quantize_FQ_Dequantize"


class DumpDequantized:
    def StartAnalysis(self, args):
        self.folder = Path(args)
        self.record = 0
        self.seen = []
        self.wanted = set((self.folder / "tensors.txt").read_text().split())

    def EndNetworkExecution(self, outputs):
        self.record += 1

    def DefaultOpPost(self, name, opcode, inputs, output):
        self.seen.append((opcode, name, output["name"]))
        if opcode != "Dequantize" or not name.endswith(SUFFIX):
            return
        tensor = name[: -len(SUFFIX)]
        if tensor in self.wanted:
            folder = self.folder / str(self.record)
            folder.mkdir(exist_ok=True)
            np.save(folder / (tensor.replace("/", "_") + ".npy"), output["data"])

    def EndAnalysis(self):
        lines = [" ".join(entry) for entry in self.seen]
        (self.folder / "calls.txt").write_text("\n".join(lines) + "\n")
