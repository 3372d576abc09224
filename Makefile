# The README's two commands: `make run` and `make test`. Each sets up .venv on its own.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
WORKLOAD ?= workloads/digits_cnn.yaml
# The torch build tested here; another platform can pass its own constraints file.
TORCH_CONSTRAINTS ?= constraints.txt
# The test suite also checks against NVIDIA modelopt, runs ZigZag, a Dask cluster,
# onnxruntime, a pretrained MiniLM, numba's AGE-MOEA and torchao's MX/NVFP4 reference;
# `make test TEST_EXTRAS=dev` skips those tests.
TEST_EXTRAS ?= dev,modelopt,zigzag,dask,onnx,openvino,transformers,agemoea,torchao
PIP := $(BIN)/python -m pip install --disable-pip-version-check -c $(TORCH_CONSTRAINTS)

.PHONY: run test clean-venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml $(TORCH_CONSTRAINTS) | $(BIN)/python
	$(PIP) -e .
	touch $@

$(VENV)/.installed-$(TEST_EXTRAS): pyproject.toml $(TORCH_CONSTRAINTS) | $(BIN)/python
	$(PIP) -e '.[$(TEST_EXTRAS)]'
	touch $@ $(VENV)/.installed

run: $(VENV)/.installed
	$(BIN)/model-explorer retrain --baseline --if-missing $(WORKLOAD)
	$(BIN)/model-explorer calibrate --if-missing $(WORKLOAD)
	$(BIN)/model-explorer explore $(WORKLOAD) --report

test: $(VENV)/.installed-$(TEST_EXTRAS)
	$(BIN)/python -m pytest

clean-venv:
	rm -rf $(VENV)
