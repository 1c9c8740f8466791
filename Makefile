# Developer entry points; .ci/run runs `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: all demo test test-rust test-python lint fmt bench-build develop clean

all: lint test

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# Builds the extension in release mode and installs it editable, with the test extras.
$(STAMP): $(PY) pyproject.toml Cargo.toml $(shell find src python -name '*.rs' -o -name '*.py' -o -name '*.pyi')
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

develop: $(STAMP)

## demo: the main job: write across three directories, read back zero-copy, show placement.
demo: $(STAMP)
	$(PY) -m rmqlog.demo

## test: lints, Rust tests (no Python), benches build, Python tests.
test: lint test-rust bench-build test-python

test-rust:
	cargo test --all-targets
	cargo test --doc

test-python: $(STAMP)
	$(PY) -m pytest -q

bench-build:
	cargo bench --no-run

## lint: rustfmt, clippy with and without the python feature, ruff.
lint: $(STAMP)
	cargo fmt --check
	cargo clippy --all-targets -- -D warnings
	cargo clippy --all-targets --features python -- -D warnings
	$(VENV)/bin/ruff check python tests benches
	$(VENV)/bin/ruff format --check python tests benches

fmt: $(STAMP)
	cargo fmt
	$(VENV)/bin/ruff format python tests benches
	$(VENV)/bin/ruff check --fix python tests benches

clean:
	rm -rf $(VENV) target
