"""What every setting is built from, below every capability that has settings: strict specs
and registry-typed specs (specs.py), the name -> builder registries of the extension points
(registry.py), the workload's paths (paths.py), strict YAML reading (yamlfile.py) and the
dataset roles (roles.py). Nothing here imports torch."""
