# ram-a-kv: one-command set-up. Needs only python3.11 and make.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# torch is pinned to the CPU build first so lmcache does not pull a multi-GB CUDA build.
TORCH_PIN ?= torch==2.13.0
export LMCACHE_TRACK_USAGE := false

.PHONY: run daemon test lint bench soak clean

$(VENV)/.base:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e .
	touch $@

$(VENV)/.test: $(VENV)/.base pyproject.toml
	$(PIP) install -q "$(TORCH_PIN)"
	$(PIP) install -q -e ".[test,lmcache]"
	touch $@

run: $(VENV)/.base
	$(VENV)/bin/ram-a-kv --noop

daemon: $(VENV)/.base
	$(VENV)/bin/ram-a-kv --noop

test: $(VENV)/.test
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q
	bash tests/test_integration.sh

lint: $(VENV)/.test
	$(VENV)/bin/ruff check .

bench: $(VENV)/.test
	$(PY) -m bench

soak: $(VENV)/.test
	$(PY) -m pytest -q -m soak

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
