"""Training: the loop and the workload's `retraining:` settings (loop.py). Fine-tuning the
individuals of a result is done to a workload: operations/retraining.py."""
