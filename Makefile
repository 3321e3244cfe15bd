# The two commands of the README:
#   make book   set up .venv if missing or stale, then build the HTML book into _build/html
#   make test   same set-up, then lint, unit tests, strict nbval over every chapter, strict build,
#               and the browser check of every built page
# Everything else here is a helper of those two.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The Multi30k copy the training chapter reads; unset means "download into the user cache".
export MULTI30K_DIR ?=
# Notebooks draw through the Jupyter kernel's inline backend; an inherited MPLBACKEND (e.g. Agg on a
# headless CI machine) would replace it and plt.show() would store no figure at all.
unexport MPLBACKEND

.PHONY: book test lint unit nbval nbval-othercpu build browser execute clean linkcheck

# A venv is stale when requirements.txt or pyproject.toml is newer than its stamp.
# The book's JavaScript (MathJax, vega, vega-lite, vega-embed) is pinned in package-lock.json and
# installed by `npm ci`; _ext/offline_assets.py serves it from the build (no CDN). npm ci writes
# node_modules/.package-lock.json, so a changed lock file (or a deleted node_modules) reinstalls.
NODE_STAMP := node_modules/.package-lock.json
$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

$(STAMP): requirements.txt pyproject.toml $(NODE_STAMP)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

book: $(STAMP) build

# -W: Sphinx warnings are errors; --keep-going: report all of them before failing.
build: $(STAMP)
	$(BIN)/jupyter-book build . -W -n --keep-going --all
	@echo "Book built: open _build/html/index.html"

# Lint: ruff, the notebook checks, a spell check of prose and comments (codespell; the project's
# word list is [tool.codespell] in pyproject.toml) over the files and the chapters' cell sources,
# and the GitHub workflows against their schema (check-jsonschema's vendored copy, no network).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python tools/check_notebooks.py
	$(BIN)/codespell
	d=$$(mktemp -d) && $(BIN)/python tools/notebook_text.py $$d && $(BIN)/codespell $$d; \
		status=$$?; rm -rf $$d; exit $$status
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml

unit: $(STAMP)
	$(BIN)/python -m pytest tests -q

# Strict nbval: stored text outputs compared; only what nbval_sanitize.cfg rewrites is forgiven.
# NB narrows it to some chapters: make nbval NB=chapters/06_positional_encoding.ipynb
# Chapter 8 (the only one that reads TRANSFORMER_BOOK_CONFIG) trains its quick configuration here,
# a smoke test: without a GPU its default is the five-minute cpu configuration, the run its stored
# outputs show (training outputs are not compared; its folded cells check the text's figures
# against that run's record, in either configuration).
NB ?= chapters/*.ipynb
NBVAL := env TRANSFORMER_BOOK_CONFIG=quick $(BIN)/python -m pytest --nbval --nbval-current-env --nbval-sanitize-with nbval_sanitize.cfg \
		-p no:cacheprovider -q
nbval: $(STAMP)
	$(NBVAL) $(NB)

# The same comparison with the arithmetic changed the way another CPU changes it: PyTorch's
# kernels without vector instructions (ATEN_CPU_CAPABILITY=default, where this machine picks
# AVX-512 or AVX2), MKL on its portable code path (MKL_CBWR=COMPATIBLE: other BLAS/LAPACK
# kernels, other summation orders) and one thread where a chapter does not set its own.
# benchmarks/cpu_variants.py measures which settings change results on the machine at hand;
# these two did here, the instruction-set caps of oneDNN and MKL did not. A printed figure that
# differs under them carries more digits than hold on a reader's CPU.
OTHER_CPU := ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE OMP_NUM_THREADS=1
nbval-othercpu: $(STAMP)
	env $(OTHER_CPU) $(NBVAL) $(NB)

# Every page of the built book opened in Debian's Chromium (tests/browser; after build).
browser: build
	$(BIN)/python -m pytest tests/browser -q

test: lint unit nbval nbval-othercpu build browser

# The book's external links (needs the network: the scheduled linkcheck workflow runs it).
linkcheck: $(STAMP)
	$(BIN)/jupyter-book build . --builder linkcheck

# Re-execute notebooks in place (after editing a chapter): make execute NB=chapters/01_rnn_limitations.ipynb
execute: $(STAMP)
	$(BIN)/python tools/execute_notebooks.py $(NB)

# The oldest torch the book supports (pyproject.toml: torch>=2.3), in its own venv OUTSIDE the
# repository (the PyPI wheel brings a few GB of CUDA libraries) that later runs reuse: every
# chapter with Colab's "Run all" semantics (tools/run_all.py: no output comparison), then the
# unit tests. torch 2.3 was built against NumPy 1.x, hence numpy<2 (in the same pip call as the
# package, so no newer pandas pulls NumPy 2 back in); pip resolves the package's other
# dependencies under that constraint, and the test tools come at requirements.txt's pins.
# Chapter 8 trains its quick configuration there too, as under nbval.
COMPAT_TORCH ?= 2.3.1
COMPAT_PINS  ?= numpy<2
COMPAT_VENV  ?= $(HOME)/.cache/transformer-book/venv-torch$(COMPAT_TORCH)
COMPAT_TOOLS := jupyter-book|ipykernel|nbformat|pytest|PyYAML|build
.PHONY: compat
compat: $(STAMP)
	test -x $(COMPAT_VENV)/bin/python || $(PYTHON) -m venv $(COMPAT_VENV)
	grep -E '^($(COMPAT_TOOLS))==' requirements.txt > $(COMPAT_VENV)/tools.txt
	$(COMPAT_VENV)/bin/python -m pip install --quiet "torch==$(COMPAT_TORCH)" "$(COMPAT_PINS)" \
		-r $(COMPAT_VENV)/tools.txt "setuptools>=77" -e .
	$(COMPAT_VENV)/bin/python -m pip freeze --exclude-editable
	status=0; \
	TRANSFORMER_BOOK_CONFIG=quick $(BIN)/python tools/run_all.py --python $(COMPAT_VENV)/bin/python chapters/*.ipynb || status=1; \
	$(COMPAT_VENV)/bin/python -m pytest tests -q --ignore=tests/browser || status=1; \
	exit $$status

# On a machine with a CUDA GPU: the device's unit tests, chapter 8's quick configuration and 300
# steps of its full one on `cuda`, each timed, with a time limit (tools/gpu_check.py). No venv is
# made: the interpreter that has PyTorch runs it (.venv's if there is one, else $(PYTHON)) with
# the package on PYTHONPATH. Multi30k: $(MULTI30K_DIR), or .gpudata/multi30k. CI has no GPU.
#   make gpu-check PYTHON=python3 GPU_CHECK_ARGS="--out /tmp/gpu_check.json"
GPU_PYTHON     ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))
GPU_CHECK_ARGS ?=
.PHONY: gpu-check
gpu-check:
	PYTHONPATH=code$${PYTHONPATH:+:$$PYTHONPATH} $(GPU_PYTHON) tools/gpu_check.py $(GPU_CHECK_ARGS)

clean:
	rm -rf _build
