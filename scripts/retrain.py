#!/usr/bin/env python
"""Train the workload's float baseline: `scripts/retrain.py --baseline WORKLOAD` (see --help)."""

import sys

from model_explorer.cli import main

if __name__ == "__main__":
    sys.exit(main(["retrain", *sys.argv[1:]]))
