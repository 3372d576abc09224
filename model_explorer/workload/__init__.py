"""The workload file and what a command builds from it: the Workload (file.py, one YAML file
for model, data, problem and search), the original tool's spellings mapped to ours
(original_layout.py), and the WorkloadContext (context.py: device, model and data, built
once)."""
