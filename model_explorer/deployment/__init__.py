"""A chosen configuration as runtimes execute it: QDQ ONNX export (export.py, encodings.py,
graph.py), the runtimes that run the file (runtimes.py) and the check of their accuracy against
what the search recorded (check.py)."""
