#!/usr/bin/env python
"""Zero blocks already present per sample, every threshold 0: `sparse_already_present.py WORKLOAD
[--dataset ROLE] [--output CSV]` (the same as `model-explorer blocks --present`)."""

import sys

from model_explorer.cli import main

if __name__ == "__main__":
    sys.exit(main(["blocks", "--present", *sys.argv[1:]]))
