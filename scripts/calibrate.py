#!/usr/bin/env python
"""Calibrate a workload's quantizers: `scripts/calibrate.py WORKLOAD [--force] [-v] [-p]`."""

import sys

from model_explorer.cli import main

if __name__ == "__main__":
    sys.exit(main(["calibrate", *sys.argv[1:]]))
