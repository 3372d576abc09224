"""Analyses around the search, one folder per command: operator hooks (`analyze`),
quantization diagnostics (`diagnose`) and cross-environment comparison (`compare`)."""
