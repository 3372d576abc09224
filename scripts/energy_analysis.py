#!/usr/bin/env python
"""Per-layer DRAM accesses to CSV: `energy_analysis.py WORKLOAD [--backend analytic|zigzag]`."""

import sys

from model_explorer.cli import main

if __name__ == "__main__":
    sys.exit(main(["energy-analysis", *sys.argv[1:]]))
