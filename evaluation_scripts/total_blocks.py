#!/usr/bin/env python
"""Blocks per layer for an input shape: `total_blocks.py WORKLOAD [--input-shape N C H W]
[--output CSV]` (the same as `model-explorer blocks`)."""

import sys

from model_explorer.cli import main

if __name__ == "__main__":
    sys.exit(main(["blocks", *sys.argv[1:]]))
