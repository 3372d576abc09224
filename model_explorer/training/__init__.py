"""Training: the workload's `retraining:` settings (spec.py, no torch) and the loop that reads
them (loop.py). Fine-tuning the individuals of a result is done to a workload:
operations/retraining.py."""
