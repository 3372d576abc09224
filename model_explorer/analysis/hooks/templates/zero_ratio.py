"""Per-operator share of exact zeros in the output (activation sparsity), written as CSV.
--analysis-args: the CSV file (default zero_ratio.csv)."""

import csv


class ZeroRatio:
    def __init__(self, args: str = "") -> None:
        self.path = args or "zero_ratio.csv"
        self.counts = {}

    def DefaultOpPost(self, name, opcode, inputs, output) -> None:
        if output is None:
            return
        data = output["data"]
        zeros, total = self.counts.get(name, (opcode, 0, 0))[1:]
        self.counts[name] = (opcode, zeros + int((data == 0).sum()), total + data.size)

    def EndAnalysis(self) -> None:
        if not self.counts:  # no sample ran (a refused input): an earlier file stays as it is
            return
        with open(self.path, "w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(["operator", "opcode", "zeros", "elements", "zero_ratio"])
            for name, (opcode, zeros, total) in self.counts.items():
                writer.writerow([name, opcode, zeros, total, zeros / total if total else 0.0])
