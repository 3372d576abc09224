# The README's two commands: `make run` and `make test`. Each sets up .venv on its own.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
WORKLOAD ?= workloads/digits_cnn.yaml
# The torch build tested here; another platform can pass its own constraints file.
TORCH_CONSTRAINTS ?= constraints.txt
# The test suite also checks against NVIDIA modelopt, runs ZigZag, a Dask cluster,
# onnxruntime, OpenVINO, Apache TVM, a pretrained MiniLM, numba's AGE-MOEA and torchao's
# MX/NVFP4 reference and quantizes networks of timm and EfficientNet-Lite; `make test
# TEST_EXTRAS=dev LITERT=0` skips those tests.
TEST_EXTRAS ?= dev,modelopt,zigzag,dask,onnx,openvino,tvm,transformers,agemoea,torchao,zoo,photos,docs
# LiteRT cannot share an environment with TVM (pyproject.toml, the litert extra): its packages
# go into a small second environment layered over the test environment (a .pth file adds the
# first one's packages behind its own), where its tests run. LITERT=0 leaves it out.
LITERT ?= 1
LITERT_VENV ?= .venv-litert
PURELIB := import sysconfig; print(sysconfig.get_path('purelib'))
PIP := $(BIN)/python -m pip install --disable-pip-version-check -c $(TORCH_CONSTRAINTS)

.PHONY: run test test-asan test-planted docs test-kernels clean-venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml $(TORCH_CONSTRAINTS) | $(BIN)/python
	$(PIP) -e .
	touch $@

$(VENV)/.installed-$(TEST_EXTRAS): pyproject.toml $(TORCH_CONSTRAINTS) | $(BIN)/python
	$(PIP) -e '.[$(TEST_EXTRAS)]'
	touch $@ $(VENV)/.installed

# The documentation site into site/ (open site/index.html; it works offline).
$(VENV)/.installed-docs: pyproject.toml $(TORCH_CONSTRAINTS) | $(BIN)/python
	$(PIP) -e '.[docs]'
	touch $@ $(VENV)/.installed

docs: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site
	@echo "open site/index.html (it works offline, search included)"

run: $(VENV)/.installed
	$(BIN)/model-explorer retrain --baseline --if-missing $(WORKLOAD)
	$(BIN)/model-explorer calibrate --if-missing $(WORKLOAD)
	$(BIN)/model-explorer explore $(WORKLOAD) --report

$(LITERT_VENV)/.installed: pyproject.toml $(TORCH_CONSTRAINTS) $(VENV)/.installed-$(TEST_EXTRAS)
	$(PYTHON) -m venv $(LITERT_VENV)
	echo "import site; site.addsitedir('$$($(BIN)/python -c "$(PURELIB)")')" \
		> "$$($(LITERT_VENV)/bin/python -c "$(PURELIB)")/model_explorer_base.pth"
	$(LITERT_VENV)/bin/python -m pip install --disable-pip-version-check \
		-c $(TORCH_CONSTRAINTS) -e '.[litert]'
	touch $@

# The suite runs on every core (pytest-xdist, at most TEST_WORKERS processes: each holds a
# torch and its models, some 2 GB); tests that share an expensive fixture are grouped onto one
# worker (`xdist_group`). `make test TEST_WORKERS=0` runs it in one process.
TEST_WORKERS ?= 4
PYTEST_WORKERS := $(if $(filter 0,$(TEST_WORKERS)),,-n auto --maxprocesses $(TEST_WORKERS) --dist loadgroup)

# In .venv-litert, typeguard (a pytest plugin of the first environment) would not import with
# the older typing-extensions.
# Then two lanes of the C kernels (model_explorer/native): the quantization, formats and
# sparsity tests again with the kernels off (the torch path every machine without a C compiler
# takes: the same values), and the kernels' bit-for-bit tests once per instruction level their
# libraries hold that this processor runs (tests/across_kernels.py --levels).
KERNEL_TESTS := tests/formats/test_kernels.py tests/sparsity/test_kernel.py
test: $(VENV)/.installed-$(TEST_EXTRAS) $(if $(filter 1,$(LITERT)),$(LITERT_VENV)/.installed)
	$(BIN)/python -m pytest $(PYTEST_WORKERS)
	MODEL_EXPLORER_COMPILE=0 $(BIN)/python -m pytest $(PYTEST_WORKERS) -q -rfE tests/quantization tests/formats tests/sparsity
	$(BIN)/python tests/across_kernels.py --levels -- $(PYTEST_WORKERS) $(KERNEL_TESTS)
	$(if $(filter 1,$(LITERT)),$(LITERT_VENV)/bin/python -m pytest $(PYTEST_WORKERS) -p no:typeguard tests/analysis/test_litert.py)

# The C kernels' tests under AddressSanitizer (docs/development.md): their libraries built with
# -fsanitize=address (a library of their own in the kernel cache, since CC's arguments name it),
# the sanitizer's runtime preloaded, and libstdc++ with it so that torch's C++ exceptions pass
# its interceptor. A RuntimeWarning is an error: a library that did not build tests nothing.
ASAN_CC ?= $(or $(CC),cc)
test-asan: $(VENV)/.installed-$(TEST_EXTRAS)
	CC="$(ASAN_CC) -fsanitize=address -fno-omit-frame-pointer" \
	LD_PRELOAD="$$($(ASAN_CC) -print-file-name=libasan.so) $$($(ASAN_CC) -print-file-name=libstdc++.so)" \
	ASAN_OPTIONS=detect_leaks=0 \
	$(BIN)/python -m pytest -W error::RuntimeWarning $(KERNEL_TESTS) tests/test_native_cache.py \
		tests/quantization/test_elision.py tests/quantization/test_attention_overwriting.py

# Planted faults (tests/planted/, docs/development.md): each catalogued patch, a realistic bug,
# applied in a scratch copy of the repository and the tests that must catch it run there, then
# a table of the faults caught and missed; a patch that no longer applies is named. Not part of
# `make test` (it runs those tests again once per fault: two to five minutes): run it before a
# release and with any change to the code a patch covers. PLANTED="name ..." runs those only.
PLANTED ?=
test-planted: $(VENV)/.installed-$(TEST_EXTRAS)
	$(BIN)/python tests/planted/run.py $(foreach name,$(PLANTED),--only $(name))

# The suite once per kernel setting (tests/across_kernels.py: AVX2, AVX, SSE4.2, one and two
# threads beside the native one), about 50 minutes; KERNELS=avx2,threads1 picks settings.
KERNELS ?=
test-kernels: $(VENV)/.installed-$(TEST_EXTRAS) $(if $(filter 1,$(LITERT)),$(LITERT_VENV)/.installed)
	$(BIN)/python tests/across_kernels.py $(if $(KERNELS),--settings $(KERNELS))
	$(if $(filter 1,$(LITERT)),$(BIN)/python tests/across_kernels.py \
		$(if $(KERNELS),--settings $(KERNELS)) --python $(LITERT_VENV)/bin/python \
		-- -p no:typeguard tests/analysis/test_litert.py)

clean-venv:
	rm -rf $(VENV) $(LITERT_VENV)
