"""`python -m model_explorer` is the `model-explorer` command."""

import sys

from model_explorer.cli import main

sys.exit(main())
