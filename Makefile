# hloc developer commands. `make help` lists them.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
JAXENV ?= .jaxenv
DEMO   ?= mlp
DEMO_TARGET ?= cpu

.DEFAULT_GOAL := help
.PHONY: help venv demo test test-all suite suite-all lint typecheck format proto proto-check samples bench gpu-check clean fuzz

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@# compat: hloc's directory as a plain path in a .pth, not setuptools' import hook, which
	@# costs every hloc command ~30 ms of Python start (a wheel install has neither). The
	@# mode is "transitional" in setuptools: the default editable install if it goes away.
	@# --no-compile: bytecode is written at first import, for what is imported (7 of 27 s).
	PYTHONWARNINGS=ignore $(PY) -m pip install --quiet --no-compile -e '.[dev,dist]' \
		--config-settings editable_mode=compat \
		|| $(PY) -m pip install --quiet --no-compile -e '.[dev,dist]'
	@touch $(STAMP)

venv: $(STAMP) ## create the virtualenv and install hloc with dev and dist (MPI) extras

demo: $(STAMP) ## compile and run a sample end to end
	@mkdir -p demo-out
	$(VENV)/bin/hloc compile samples/$(DEMO).pb -o demo-out/$(DEMO).bundle --target $(DEMO_TARGET) --dump-dir demo-out/dump
	$(VENV)/bin/hloc inspect demo-out/$(DEMO).bundle
	$(VENV)/bin/hlo-run demo-out/$(DEMO).bundle --inputs samples/$(DEMO).inputs.npz \
		--expected samples/$(DEMO).expected.npz --benchmark 20

# Tests run on two workers (pytest-xdist, a dev dependency): the suite is CPU-bound (LLVM,
# the emulator) and every test is independent (tmp_path). Without xdist they run serially.
XDIST  = $(shell $(PY) -c "import xdist" 2>/dev/null && echo "-n 2")

# mypy (one core, ~25 s from a fresh clone) runs beside the suite, which leaves a core idle now
# and then (the workers' start, the last tests of one while the other finishes): about 20 s of
# a fresh `make test`. -Oline keeps each line of theirs whole; either failing fails the target.
test: $(STAMP) ## lint + the test suite without `slow` tests (every backend still against the interpreter)
	$(PY) tools/gen_proto.py --check
	$(VENV)/bin/ruff check hloc tests tools benchmarks
	@$(MAKE) --no-print-directory -j2 -Oline typecheck suite

test-all: $(STAMP) ## lint + the whole test suite, `slow` tests included
	$(PY) tools/gen_proto.py --check
	$(VENV)/bin/ruff check hloc tests tools benchmarks
	@$(MAKE) --no-print-directory -j2 -Oline typecheck suite-all

suite: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider $(XDIST) -m "not slow"

suite-all: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider $(XDIST)

lint: $(STAMP) ## ruff lint and mypy type check
	$(VENV)/bin/ruff check hloc tests tools benchmarks
	$(PY) -m mypy

typecheck: $(STAMP) ## mypy on hloc/ (config and known debt in pyproject.toml; cache in .mypy_cache)
	$(PY) -m mypy

format: $(STAMP) ## ruff format
	$(VENV)/bin/ruff format hloc tests tools benchmarks

proto: $(STAMP) ## regenerate hloc/frontend/gen from proto/*.proto
	$(PY) tools/gen_proto.py

proto-check: $(STAMP) ## fail if the generated protobuf modules are stale
	$(PY) tools/gen_proto.py --check

$(JAXENV)/.installed:
	@test -x $(JAXENV)/bin/python || $(PYTHON) -m venv $(JAXENV)
	$(JAXENV)/bin/python -m pip install --quiet jax==0.10.2 jaxlib==0.10.2 ml_dtypes==0.6.0 \
		keras==3.15.1 keras-hub==0.32.0
	@touch $@

samples: $(JAXENV)/.installed ## regenerate samples/ and samples/models/ with JAX and Keras (dev only; needs network once)
	$(JAXENV)/bin/python samples/generate.py --out samples
	KERAS_BACKEND=jax $(JAXENV)/bin/python samples/models/generate.py

bench: $(STAMP) $(JAXENV)/.installed ## run the benchmarks, incl. hloc vs XLA CPU in the same run (CPU=x86-64-v3: an AVX2 build on both sides)
	JAXENV=$(abspath $(JAXENV)) HLOC_BENCH_CPU=$(CPU) $(PY) benchmarks/run.py

gpu-check: ## on an NVIDIA GPU: gpu tests + GPU benchmarks and models vs jax's XLA (tools/gpu_check.py; OUT=dir ONLY=cases,models K=substr)
	PYTHONPATH=. $(PYTHON) tools/gpu_check.py --out $(or $(OUT),gpu-check-out) $(if $(ONLY),--only $(ONLY)) $(if $(K),-k $(K))

fuzz: $(STAMP) ## fuzz the bundle, proto, text and .npz readers for HLOC_FUZZ_SECONDS (default 60)
	$(PY) tools/fuzz.py

clean: ## remove build products (keeps the virtualenvs)
	rm -rf build dist *.egg-info demo-out .pytest_cache .mypy_cache gpu-check-out
