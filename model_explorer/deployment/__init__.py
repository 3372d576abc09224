"""A chosen configuration as runtimes execute it: the QDQ ONNX export (export.py, encodings.py,
graph.py, biases.py, inplace.py), the quantized_decomposed PyTorch form LiteRT's converter
reads (quantized_decomposed.py), the plain plan and modelopt's `quant_cfg` for other toolchains
(toolchains.py), the runtimes that run a file or a model (runtimes/, one Runtime per backend)
and the export-fidelity audit (audit.py, audit_render.py). Doing this to a workload's
individual (exporting it, activating it, checking its accuracy in each runtime) is in
operations/deploy.py and operations/deployment_check.py, above the WorkloadContext."""
