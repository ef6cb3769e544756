# latentgp: two commands.  `make demo` runs the main job, `make test` runs the tests.
# Both create .venv on first use and install the CPU build of torch before the package,
# so pip never pulls a multi-GB CUDA build.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_VERSION ?= 2.13.0
LATENTGP_DATA ?= $(abspath ../shared/data)
export LATENTGP_DATA

.PHONY: demo test lint slow bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "torch==$(TORCH_VERSION)"
	$(PY) -m pip install --quiet -e ".[data,plot,dev,mcmc,bo]"
	touch $@

demo: $(VENV)/.installed
	$(PY) examples/demo.py --out demo-output

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests benchmarks examples

test: $(VENV)/.installed lint
	$(PY) -m pytest -q

slow: $(VENV)/.installed
	$(PY) -m pytest -q -m slow

clean:
	rm -rf $(VENV) demo-output .pytest_cache
