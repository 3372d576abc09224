"""What a search's result looks like to a reader: text tables for the command line and
report.md (text.py), and the figures of results and energy analyses (plots.py)."""
