#!/usr/bin/env python
"""Run an analysis with operator hooks: `scripts/analyze.py --workload W --analysis FILE.py`
(add `--dalgona` for analysis files written for dalgona)."""

import sys

from model_explorer.cli import main

if __name__ == "__main__":
    sys.exit(main(["analyze", *sys.argv[1:]]))
