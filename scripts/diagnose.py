#!/usr/bin/env python
"""Quantization diagnostics: `scripts/diagnose.py WORKLOAD [--order ...] [--output-workload P]`."""

import sys

from model_explorer.cli import main

if __name__ == "__main__":
    sys.exit(main(["diagnose", *sys.argv[1:]]))
