"""What `accuracy` measures: metric functions by name, label-free fidelity to the float
model and `evaluate` (functions.py), over metric classes that accumulate over batches
(classes.py)."""
