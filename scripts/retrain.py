#!/usr/bin/env python
"""Train the float baseline or fine-tune individuals: `retrain.py WORKLOAD [RESULTS OUT] [-n N]`."""

import sys

from model_explorer.cli import main

if __name__ == "__main__":
    sys.exit(main(["retrain", *sys.argv[1:]]))
