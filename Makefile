# The two set-up commands of the README: `make demo` and `make test`. Both start from a fresh machine
# with only Python and make: they create .venv and install ctxrank with the pinned versions.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip

.PHONY: install dev demo test test-fast fuzz lint bench published dist clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(BIN)/python pyproject.toml constraints.txt
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -c constraints.txt -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PIP) install --quiet -c constraints.txt -e '.[dev]'
	touch $@

install: $(VENV)/.installed
dev: $(VENV)/.installed-dev

demo: install
	$(BIN)/ctxrank demo

lint: dev
	$(BIN)/ruff check .

# The whole suite in TEST_JOBS worker processes (pytest-xdist), each test file whole in one of them
# (tests/conftest.py); CI has 2 cores and 15 minutes: the 25 slowest tests are listed at the end, to
# see where the time goes before adding more. TEST_JOBS=0 runs it in this process.
TEST_JOBS ?= 2
test: dev
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -n $(TEST_JOBS) --dist loadgroup --durations=25

# The daily loop: the unit and integration tests in TEST_JOBS worker processes, without the slow ones
# (marked `slow`), without the end-to-end files of tests/e2e/ (every documented command, fuzzing, the
# benchmarks' smoke runs, the matrix of entrances and data) and the files that start worker processes,
# torchrun, memory caps or kill-and-resume, the first failure stopping the run. CI runs `make test`.
FAST_SKIP := e2e experiments/test_executors.py experiments/test_evidence.py training/test_distributed.py \
	training/test_memory.py training/test_resume.py training/test_recipes.py test_tune.py export/test_export.py
test-fast: dev
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -x -n $(TEST_JOBS) --dist loadgroup -m "not slow" $(foreach t,$(FAST_SKIP),--ignore=tests/$(t))

# Input fuzzing of the readers (tests/e2e/test_fuzz.py, docs/data.md "Malformed input"): `make test` runs a
# bounded, derandomized number of examples; this runs FUZZ_EXAMPLES random ones per test (about 10
# minutes at 5000 on one core).
FUZZ_EXAMPLES ?= 5000
fuzz: dev
	CTXRANK_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q tests/e2e/test_fuzz.py tests/e2e/test_fuzz_untrusted.py -k fuzz_ \
		--hypothesis-show-statistics

# Speed benchmarks (docs/benchmarks.md), each at its target sizes, one after the other, each
# printing its Markdown tables and writing its JSON to bench-results/. Take the timings on an otherwise
# idle machine. The quality benchmarks (bench_rerank_mq2008.py, bench_choice.py, bench_arsm_letor.py,
# bench_listnet_mq2008.py) are deliberately NOT run here: they train many models over folds and seeds
# and take hours; run them by hand (commands in docs/benchmarks.md).
BENCH_OUT := bench-results
bench: install
	mkdir -p $(BENCH_OUT)
	$(BIN)/python benchmarks/bench_parser.py --json $(BENCH_OUT)/parser.json
	$(BIN)/python benchmarks/bench_train_throughput.py --json $(BENCH_OUT)/train_throughput.json
	$(BIN)/python benchmarks/bench_inference.py --json $(BENCH_OUT)/inference.json
	$(BIN)/python benchmarks/bench_qilcm_step.py --json $(BENCH_OUT)/qilcm_step.json
	$(BIN)/python benchmarks/bench_arsm_step.py --json $(BENCH_OUT)/arsm_step.json
	$(BIN)/python benchmarks/bench_recurrence_backward.py --json $(BENCH_OUT)/recurrence_backward.json
	$(BIN)/python benchmarks/bench_startup.py --json $(BENCH_OUT)/startup.json
	$(BIN)/python benchmarks/bench_batch_predict.py --json $(BENCH_OUT)/batch_predict.json
	$(BIN)/python benchmarks/bench_serve.py --json $(BENCH_OUT)/serve.json

# Every published table, p-value and figure of the README and docs/*.md rewritten from the stored evidence
# (evidence/README.md): the experiments' blocks, then the benchmark blocks. Trains nothing (under a
# minute); tests/experiments/test_evidence.py and tests/test_bench_evidence.py fail when a page differs from this.
published: install
	$(BIN)/python -m ctxrank.experiments.published
	$(BIN)/python benchmarks/cpu_evidence.py --publish

# The release files (docs/development.md, "Releasing"): dist/ctxrank-VERSION.tar.gz and the wheel built
# from it (python -m build), VERSION from src/ctxrank/_version.py.
dist: dev
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .ruff_cache
