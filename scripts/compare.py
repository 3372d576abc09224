#!/usr/bin/env python
"""Compare the model across environments: `scripts/compare.py WORKLOAD --env eager --env ...`."""

import sys

from model_explorer.cli import main

if __name__ == "__main__":
    sys.exit(main(["compare", *sys.argv[1:]]))
