"""What quantizing a recurrent layer costs a forward pass: torch's fused kernel (nn.LSTM,
nn.GRU in eval mode) against the open computation the quantized layer runs
(quantization/recurrent.py: one input product per sequence, one hidden product and the gates'
elementwise steps per time step), with its quantizers off and at 8 bits, as ratios within
this process (medians of repeated calls, inputs of a speech-like size).

    python benchmarks/bench_recurrent.py [--steps 50] [--batch 64] [--hidden 128]
"""

from __future__ import annotations

import argparse
import copy

import torch
from prepared import median_seconds
from torch import nn

from model_explorer.quantization.model import QuantizedModel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=128)
    args = parser.parse_args()
    torch.manual_seed(0)
    x = torch.randn(args.batch, args.steps, 40)  # 40 filterbank features per frame
    print(
        f"{args.batch} sequences of {args.steps} steps, hidden {args.hidden}; threads "
        f"{torch.get_num_threads()}"
    )
    for kind in (nn.LSTM, nn.GRU):
        layer = kind(40, args.hidden, num_layers=2, batch_first=True).eval()
        quantized = QuantizedModel(nn.Sequential(copy.deepcopy(layer)))  # the root is no layer
        quantized.calibrate([x], method="max")
        with torch.no_grad():
            fused = median_seconds(lambda layer=layer: layer(x), 15)
            quantized.set_enabled(False)
            off = median_seconds(lambda q=quantized: q(x), 15)
            quantized.set_enabled(True)
            on = median_seconds(lambda q=quantized: q(x), 15)
        print(
            f"{kind.__name__}: torch's kernel {fused * 1e3:.2f} ms; open, quantizers off "
            f"{off * 1e3:.2f} ms ({off / fused:.2f}x); int8 {on * 1e3:.2f} ms ({on / fused:.2f}x)"
        )


if __name__ == "__main__":
    main()
