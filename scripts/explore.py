#!/usr/bin/env python
"""Run a workload's exploration: `scripts/explore.py WORKLOAD [-v] [-p] [-s] [--resume]`."""

import sys

from model_explorer.cli import main

if __name__ == "__main__":
    sys.exit(main(["explore", *sys.argv[1:]]))
