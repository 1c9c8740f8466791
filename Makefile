# Developer entry points. `.ci/run` runs `make test`; `make help` lists the targets.
#
# What is installed in $(VENV), one stamp each, so that `make demo` and `make test` (in either
# order) build each thing once and install the extras once:
#   $(VENV)/.tools       the venv and the build tools: maturin (pyproject.toml's
#                        build-system.requires), zig and auditwheel (its dependency group `tools`)
#   $(VENV)/.built-demo  rmqlog editable, release build with DEMO_FEATURES (no tier): what
#                        `make demo` needs. A venv that has the full build (.built) keeps it:
#                        the demo runs on it (more features than it needs), nothing is downgraded.
#   $(VENV)/.built       rmqlog editable, release build with the wheel's features (pyproject.toml's
#                        [tool.maturin] features: python, tier): what the tests need. After
#                        `make demo` it compiles the tier's crates and relinks; the crates the
#                        demo compiled are reused (Cargo.toml unifies their features).
#   $(VENV)/.extras      the extras EXTRAS (test, spark, bench): what the other targets need
# Python sources need no stamp: the editable install reads python/ in place.
#
# Every build of a shared library, the extension (editable or the wheel) and the JVM reader's JNI
# library, is the same cargo configuration: release, for the target x86_64-unknown-linux-gnu, zig
# the linker and the C compiler against glibc 2.17 (the wrappers in $(ZIG), given to cargo by
# ZIG_ENV), in target/x86_64-unknown-linux-gnu/release. So the builds reuse each other's crates
# (the JNI library compiles rmqlog alone again), `make wheel` after `make develop` only packs, and
# the tests run the extension the wheel ships. Cargo recompiles every crate when the linker or a C
# compiler changes: maturin's own `--zig` writes its wrappers at a path per environment, so both
# builds use these instead.
VENV ?= .venv
PY := $(VENV)/bin/python
TOOLS := $(VENV)/.tools
BUILT_DEMO := $(VENV)/.built-demo
BUILT := $(VENV)/.built
EXTRAS_STAMP := $(VENV)/.extras
# The demo's build: PyO3 and Arrow (`python` implies `arrow`), none of the tier's 120 crates.
DEMO_FEATURES := python
# The platform tag maturin checks the extension against (auditwheel's rules) and zig links for:
# manylinux2014 is glibc 2.17. The wheel installs on manylinux2014 systems and newer.
WHEEL_COMPAT ?= manylinux2014
GLIBC := 2.17
TARGET := x86_64-unknown-linux-gnu
# The wrappers' directory names the glibc: cargo relinks when the linker's path changes, not when
# a wrapper's text does.
ZIG := target/zig-glibc$(GLIBC)
ZIG_ENV = CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER=$(abspath $(ZIG))/cc \
	CC_x86_64_unknown_linux_gnu=$(abspath $(ZIG))/cc \
	CXX_x86_64_unknown_linux_gnu=$(abspath $(ZIG))/c++ \
	AR_x86_64_unknown_linux_gnu=$(abspath $(ZIG))/ar
ZIG_BUILD := --target $(TARGET) --compatibility $(WHEEL_COMPAT)
# maturin runs zig as `python3 -m ziglang`: the venv's python3 first on PATH.
VENV_PATH = PATH="$(abspath $(VENV))/bin:$$PATH"
SOURCES := Cargo.toml Cargo.lock $(shell find src -name '*.rs')
JNI_SOURCES := jvm/native/Cargo.toml $(shell find jvm/native/src -name '*.rs')
# The editable install into $(VENV) with cargo options $(1): maturin's PEP 517 editable wheel (a
# .pth naming python/; the extension is written into python/rmqlog), cargo printing a line per
# crate (and a progress bar on a terminal), then pip installs it with rmqlog's one dependency.
DEVELOP = rm -rf $(VENV)/editable && $(VENV_PATH) $(ZIG_ENV) $(VENV)/bin/maturin pep517 \
	build-wheel --editable $(ZIG_BUILD) --out $(VENV)/editable $(1) >/dev/null && \
	$(PY) -m pip install -q --force-reinstall $(VENV)/editable/rmqlog-*.whl
EXTRAS ?= test,spark,bench
# Full passes of benches/compare.py in `make bench` (each row reported as min/median/max).
BENCH_RUNS ?= 5
# Cargo features: the Rust tests' build, and every feature (clippy). The lean core has none.
TEST_FEATURES := failpoints,arrow,tier,jvm
ALL_FEATURES := python,$(TEST_FEATURES)
# Every feature of rmqlog, for a command on the whole workspace (rmqlog and the JNI library's
# crate, jvm/native, which takes rmqlog with jvm and tier).
comma := ,
WORKSPACE_FEATURES := $(addprefix rmqlog/,$(subst $(comma), ,$(ALL_FEATURES)))
# Seconds of the randomized chaos test (tests/chaos.rs) in `make test`; `make chaos` runs longer.
CHAOS_SECS ?= 30
# `make demo` numbers its steps: [1/3], [2/3], [3/3].
STEP = $(if $(filter demo,$(MAKECMDGOALS)),[$(1)/3] )
# Prints, one a line, the requirements pyproject.toml gives for `build` (the build backend and the
# dependency group `tools`: build tools, not in the package's metadata) or for a comma-separated
# list of extras.
REQUIREMENTS = $(PY) -c 'import sys, tomllib; p = tomllib.load(open("pyproject.toml", "rb")); \
	a = sys.argv[1]; print(*(p["build-system"]["requires"] + p["dependency-groups"]["tools"] \
	if a == "build" else \
	[r for e in a.split(",") for r in p["project"]["optional-dependencies"][e]]), sep="\n")'

# The JVM reader (jvm/, src/jvm): its Java classes compiled with the JDK's javac against the jars
# the pyspark wheel ships (no Maven), and the JNI library (cargo feature jvm, release, stripped),
# packed into one jar under python/rmqlog, which the wheel ships. The library is the workspace's
# crate jvm/native (librmqlog_jvm.so), built as the extension is (ZIG_ENV, the same target
# directory), so the jar runs where the wheel installs.
JAR := python/rmqlog/jvm/rmqlog-spark.jar
JAVA_SOURCES := $(shell find jvm/src jvm/META-INF -type f)
JVM_BUILD := target/jvm
JNI_LIB := target/$(TARGET)/release/librmqlog_jvm.so
JNI_IN_JAR := $(JVM_BUILD)/classes/io/rmqlog/spark/native/linux-x86_64/librmqlog_jvm.so

.PHONY: all help demo develop jar test test-rust test-python bench-build bench-quick bench fuzz-quick chaos lint fmt wheel wheel-aarch64 doc clean

## all: lint, test and build the wheel.
all: test wheel

help:
	@grep -E '^## ' Makefile | sed 's/^## /  /'

# Step 1 of `make demo`. The build tools go into the venv so that builds skip pip's build
# isolation (no fresh build environment per build) and `make wheel` has them.
$(TOOLS): pyproject.toml
	@test -x $(PY) || echo "$(call STEP,1)creating $(VENV) with the build tools (maturin, zig: \
	450 MB, most of it zig's libc headers; seconds from pip's cache)"
	@test -x $(PY) || python3 -m venv $(VENV)
	@$(REQUIREMENTS) build > $(VENV)/build-requirements.txt
	@$(PY) -m pip install -q -r $(VENV)/build-requirements.txt
	@touch $@

# Step 2: the extension in release mode without the tier, rmqlog installed editable with its one
# dependency. Where the venv has the full build (`make develop` or `make test` made it), that one
# is brought up to date instead: the demo runs on it, and the tests' build is not undone.
$(BUILT_DEMO): $(TOOLS) $(ZIG)/cc $(SOURCES)
	@if [ -e $(BUILT) ]; then \
		echo "$(call STEP,2)the extension in $(VENV) has the tier (make develop built it): keeping it"; \
		$(MAKE) --no-print-directory $(BUILT); \
	else \
		echo "$(call STEP,2)building the extension (release, features $(DEMO_FEATURES): about 60 \
	crates, 1 minute here; cargo prints each)"; \
		$(call DEVELOP,--features $(DEMO_FEATURES)); \
	fi
	@touch $@

# The extension with the wheel's features (the tier too), rmqlog installed editable: what the
# tests and the benches use. It replaces the demo's build, whose compiled crates it reuses.
$(BUILT): $(TOOLS) $(ZIG)/cc $(SOURCES)
	@echo "building the extension (release, the wheel's features: python, tier; about 180 \
	crates, 4 minutes here; 120 crates, 2 minutes after make demo; cargo prints each)"
	@$(DEVELOP)
	@touch $@ $(BUILT_DEMO)

$(EXTRAS_STAMP): $(TOOLS)
	@echo "installing the extras $(EXTRAS) into $(VENV) (about 1 GB, most of it pyspark; a minute \
	or two from pip's cache)"
	@$(REQUIREMENTS) $(EXTRAS) > $(VENV)/extras-requirements.txt
	@$(PY) -m pip install -q -r $(VENV)/extras-requirements.txt
	@echo "installed the extras $(EXTRAS)"
	@touch $@

## develop: create .venv and install rmqlog editable (release build) with the extras. The build
## and the extras' install (two pip runs into one venv; their packages do not overlap) run side
## by side.
develop: $(TOOLS)
	@$(MAKE) --no-print-directory -j2 $(BUILT) $(EXTRAS_STAMP)
	@$(MAKE) --no-print-directory $(JAR)

## jar: the JVM reader's jar (the Spark DataSource V2 reader with its JNI library), into
## python/rmqlog/jvm/ where rmqlog.spark finds it and the wheel takes it.
jar: $(JAR)

# After the extension's build (`make develop`) every dependency is compiled already: this compiles
# rmqlog with the `jvm` feature and links, about 1 minute here. Alone, about 180 crates, 4 minutes.
$(JNI_LIB): $(TOOLS) $(ZIG)/cc $(SOURCES) $(JNI_SOURCES)
	@echo "building the JVM reader's JNI library (release, rmqlog's features jvm, tier)"
	$(VENV_PATH) $(ZIG_ENV) cargo build --release -p rmqlog-jvm --target $(TARGET)
	@touch $@

# The wrappers ZIG_ENV names: zig (through maturin's `zig` command, which adapts rustc's linker
# arguments to zig) as the linker, C and C++ compiler for glibc $(GLIBC), and zig's ar. They run
# the maturin and python3 first on PATH, the venv's in every build here (VENV_PATH), so they name
# no venv.
$(ZIG)/cc: $(TOOLS) Makefile
	@mkdir -p $(ZIG)
	@for tool in cc c++; do \
		printf '#!/bin/sh\nexec maturin zig %s -- %s "$$@"\n' $$tool \
			"-g -fno-sanitize=all -target x86_64-linux-gnu.$(GLIBC)" > $(ZIG)/$$tool; done
	@printf '#!/bin/sh\nexec python3 -m ziglang ar "$$@"\n' > $(ZIG)/ar
	@chmod +x $(ZIG)/cc $(ZIG)/c++ $(ZIG)/ar

$(JAR): $(EXTRAS_STAMP) $(JNI_LIB) $(JAVA_SOURCES)
	@rm -rf $(JVM_BUILD) && mkdir -p $(dir $(JNI_IN_JAR))
	@echo "javac (release 17, against pyspark's jars): $(words $(filter %.java,$(JAVA_SOURCES))) files"
	@javac -d $(JVM_BUILD)/classes --release 17 -Xlint:all,-path,-serial -Werror \
		-cp "$$($(PY) -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')/jars/*" \
		$(filter %.java,$(JAVA_SOURCES))
	@strip -o $(JNI_IN_JAR) $(JNI_LIB)
	@cp -r jvm/META-INF $(JVM_BUILD)/classes/
	@mkdir -p $(dir $@) && jar --create --file $@ -C $(JVM_BUILD)/classes .
	@echo "built $@ ($$(du -h $@ | cut -f1))"

## demo: the main job: write across three directories, read back zero-copy, show placement.
## Installs rmqlog alone (no extras, built without the tier) into .venv.
demo: $(BUILT_DEMO)
	@echo "$(call STEP,3)running the demo: $(PY) -m rmqlog demo"
	@$(PY) -m rmqlog demo

## test: lints, Rust tests (no Python), benches build, a bounded fuzz run, the quick bench, and
## the Python tests (Spark included), one step after another, then the seconds each took
## (tools/steps.sh). RMQLOG_REQUIRE_ALL_TESTS=1 (set by .ci/run) turns every skipped test into a
## failure naming the reason; unset, tests skip where they cannot run.
TEST_STEPS := develop lint test-rust bench-build fuzz-quick bench-quick test-python
test:
	@MAKE="$(MAKE)" bash tools/steps.sh $(TEST_STEPS)

# The Rust tests run with fail points compiled in (tests/interleavings.rs pauses operations at
# their critical steps), the Arrow API (tests/arrow.rs) and the tier (tests/tier.rs), and the
# chaos test for CHAOS_SECS. The doc tests and tests/lean.rs run on the lean core (no feature),
# where what needs the tier is refused with Error::FeatureMissing.
test-rust:
	RMQLOG_CHAOS_SECS=$(CHAOS_SECS) cargo test --all-targets --features $(TEST_FEATURES)
	cargo test --doc
	cargo test --test lean

## chaos: the randomized chaos test alone, for CHAOS_SECS (e.g. `make chaos CHAOS_SECS=600`);
## RMQLOG_CHAOS_SEED=N replays a run.
chaos:
	RMQLOG_CHAOS_SECS=$(CHAOS_SECS) cargo test --release --features tier --test chaos -- --nocapture

# The Python suite on PYTEST_WORKERS processes (pytest-xdist). The Spark tests share one session
# on one of them, and so do the wheel tests (tests/conftest.py, which stops a run whose groups
# xdist lost).
PYTEST_WORKERS ?= 2
test-python: $(BUILT) $(EXTRAS_STAMP)
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup

# `make test` builds the benches to check that they build and run, not to measure: in the Rust
# tests' configuration (test profile, TEST_FEATURES), the build `cargo test --all-targets` made
# (it also runs each bench once, quick), where the bench profile's thin LTO and debug info took
# 460 s. bench-quick's Rust rows run that binary too. `make bench` measures in the bench profile.
CHECK_BENCHES := --profile test --features $(TEST_FEATURES)

bench-build:
	cargo bench --no-run $(CHECK_BENCHES)

## bench-quick: the comparison script in quick mode (checks it runs; asserts nothing about speed).
bench-quick: $(BUILT) $(EXTRAS_STAMP)
	RMQLOG_RUST_ROWS_CARGO_ARGS="$(CHECK_BENCHES)" $(PY) benches/compare.py --quick \
		--out $(VENV)/bench-quick.json

## fuzz-quick: both libFuzzer targets for 30 s each (see docs/fuzzing.md).
fuzz-quick:
	bash fuzz/run.sh 30

## bench: criterion benches and the full comparison, BENCH_RUNS passes (writes bench-results.json).
bench: $(BUILT) $(EXTRAS_STAMP)
	cargo bench
	$(PY) benches/compare.py --runs $(BENCH_RUNS) --out bench-results.json

## lint: rustfmt, clippy on the lean core (no feature) and with every feature (the JNI library's
## crate too), the module graph of the core (no cycle, nothing imports the facade), ruff, mypy
## (rmqlog.spark, rmqlog._aio).
lint: $(EXTRAS_STAMP)
	cargo fmt --all --check
	cargo clippy --all-targets -- -D warnings
	cargo clippy --workspace --all-targets --features "$(WORKSPACE_FEATURES)" -- -D warnings
	$(PY) tools/module_graph.py
	$(VENV)/bin/ruff check python tests benches examples tools
	$(VENV)/bin/ruff format --check python tests benches examples tools
	$(VENV)/bin/mypy

## fmt: format Rust and Python.
fmt: $(EXTRAS_STAMP)
	cargo fmt --all
	$(VENV)/bin/ruff format python tests benches examples tools
	$(VENV)/bin/ruff check --fix python tests benches examples tools

## wheel: build the portable abi3 wheel into dist/ (replacing older rmqlog wheels there):
## manylinux2014 x86_64 (glibc 2.17 and newer), and show what `auditwheel show` finds in it.
## After `make develop` (the same build), it only packs.
wheel: $(TOOLS) $(ZIG)/cc $(JAR)
	rm -f dist/rmqlog-*.whl
	$(VENV_PATH) $(ZIG_ENV) $(VENV)/bin/maturin build --release $(ZIG_BUILD) --out dist
	$(VENV)/bin/auditwheel show dist/rmqlog-*.whl

## wheel-aarch64: the manylinux2014 aarch64 wheel into dist/aarch64/, cross-built the same way
## (zig the cross linker and C compiler; rustup adds Rust's standard library for aarch64). Does
## not build yet: src/shared's control page assumes a 40-byte pthread mutex, 48 on aarch64.
AARCH64 := aarch64-unknown-linux-gnu
wheel-aarch64: $(TOOLS)
	rustup target add $(AARCH64)
	rm -rf dist/aarch64
	$(VENV_PATH) $(VENV)/bin/maturin build --release --zig --compatibility $(WHEEL_COMPAT) \
		--target $(AARCH64) --out dist/aarch64
	$(VENV)/bin/auditwheel show dist/aarch64/rmqlog-*.whl

## doc: Rust API docs.
doc:
	cargo doc --no-deps

clean:
	rm -rf $(VENV) target dist
