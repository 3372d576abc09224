#!/usr/bin/env python
"""Re-evaluate the best individuals of a result: `evaluate_individual.py WORKLOAD RESULTS`."""

import sys

from model_explorer.cli import main

if __name__ == "__main__":
    sys.exit(main(["evaluate-individual", *sys.argv[1:]]))
