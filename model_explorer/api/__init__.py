"""The package as calls from research code: `search` (a caller's model and batches in, a
Search out), `quantize` and `calibrate`. Nothing below imports this room."""
