"""What is done to a workload, above its WorkloadContext: its quantized model calibrated
(pipeline.py), its problem built (quantization_builder.py, sparsity_builder.py, rebuild.py),
searched (explore.py, result_file.py) and re-evaluated (reevaluate.py), its energy model
(energy.py) and sparsity report (sparsity_report.py). The packages below hold the settings
the workload reads and the library these steps call; nothing below imports this package."""
