# Developer entry points. `.ci/run` runs `make test`; `make help` lists the targets.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
EXTRAS ?= test,spark,bench
# Seconds of the randomized chaos test (tests/chaos.rs) in `make test`; `make chaos` runs longer.
CHAOS_SECS ?= 30

.PHONY: all help demo develop test test-rust test-python bench-build bench-quick bench fuzz-quick chaos lint fmt wheel doc clean

## all: lint, test and build the wheel.
all: test wheel

help:
	@grep -E '^## ' Makefile | sed 's/^## /  /'

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# Builds the extension in release mode and installs it editable, with the extras.
$(STAMP): $(PY) pyproject.toml Cargo.toml $(shell find src python -name '*.rs' -o -name '*.py' -o -name '*.pyi')
	$(PY) -m pip install -q -e '.[$(EXTRAS)]'
	touch $(STAMP)

## develop: create .venv and install rmqlog editable (release build) with the extras.
develop: $(STAMP)

## demo: the main job: write across three directories, read back zero-copy, show placement.
demo: $(STAMP)
	$(PY) -m rmqlog demo

## test: lints, Rust tests (no Python), benches build, a bounded fuzz run, the quick bench, and
## the Python tests (Spark included). RMQLOG_REQUIRE_ALL_TESTS=1 (set by .ci/run) turns every
## skipped test into a failure naming the reason; unset, tests skip where they cannot run.
test: lint test-rust bench-build fuzz-quick bench-quick test-python

# The Rust tests run with fail points compiled in (tests/interleavings.rs pauses operations at
# their critical steps), and the chaos test for CHAOS_SECS.
test-rust:
	RMQLOG_CHAOS_SECS=$(CHAOS_SECS) cargo test --all-targets --features failpoints
	cargo test --doc

## chaos: the randomized chaos test alone, for CHAOS_SECS (e.g. `make chaos CHAOS_SECS=600`);
## RMQLOG_CHAOS_SEED=N replays a run.
chaos:
	RMQLOG_CHAOS_SECS=$(CHAOS_SECS) cargo test --release --test chaos -- --nocapture

test-python: $(STAMP)
	$(PY) -m pytest -q

bench-build:
	cargo bench --no-run

## bench-quick: the comparison script in quick mode (checks it runs; asserts nothing about speed).
bench-quick: $(STAMP)
	$(PY) benches/compare.py --quick --out $(VENV)/bench-quick.json

## fuzz-quick: both libFuzzer targets for 30 s each (see docs/fuzzing.md).
fuzz-quick:
	bash fuzz/run.sh 30

## bench: criterion benches and the full comparison (writes bench-results.json).
bench: $(STAMP)
	cargo bench
	$(PY) benches/compare.py --out bench-results.json

## lint: rustfmt, clippy with and without the python and failpoints features, the module graph
## of the core (no cycle, nothing imports the facade), ruff.
lint: $(STAMP)
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings
	cargo clippy --all-targets --features python,failpoints -- -D warnings
	$(PY) tools/module_graph.py
	$(VENV)/bin/ruff check python tests benches examples
	$(VENV)/bin/ruff format --check python tests benches examples

## fmt: format Rust and Python.
fmt: $(STAMP)
	cargo fmt
	$(VENV)/bin/ruff format python tests benches examples
	$(VENV)/bin/ruff check --fix python tests benches examples

## wheel: build the abi3 wheel into dist/.
wheel: $(STAMP)
	$(VENV)/bin/maturin build --release --out dist

## doc: Rust API docs.
doc:
	cargo doc --no-deps

clean:
	rm -rf $(VENV) target dist
