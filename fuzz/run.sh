#!/usr/bin/env bash
# Builds and runs both fuzz targets of rmqlog for SECONDS each (default 30); exits non-zero when a
# target crashes or panics. Works from a fresh clone with only cargo on stable Rust: builds the
# targets with plain cargo and the instrumentation flags `cargo fuzz build --sanitizer none
# --debug-assertions` passes (no cargo-fuzz to install, no nightly flag), runs the libFuzzer
# binaries directly, and keeps libFuzzer's growing corpus out of the repository (fuzz/work/,
# git-ignored). See docs/fuzzing.md.
#
#   fuzz/run.sh [SECONDS]
#
# Environment:
#   FUZZ_SANITIZER=address  build with AddressSanitizer instead (needs -Zsanitizer: run.sh then
#                           sets RUSTC_BOOTSTRAP=1 for the build, the one place it is needed)
#   FUZZ_TARGETS="a b"      run only these targets
#   RMQLOG_FUZZ_TMP=DIR     scratch stores go there (default /dev/shm, else the temp directory)
set -euo pipefail

secs="${1:-30}"
case "$secs" in
    '' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;;
esac
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

sanitizer="${FUZZ_SANITIZER:-none}"
targets=(${FUZZ_TARGETS:-decode_segment recover_image})
# libFuzzer's coverage instrumentation, debug assertions and overflow checks (rmqlog's too).
flags="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4"
flags+=" -Cllvm-args=-sanitizer-coverage-inline-8bit-counters"
flags+=" -Cllvm-args=-sanitizer-coverage-pc-table -Cllvm-args=-sanitizer-coverage-trace-compares"
flags+=" -Cdebug-assertions"
if [ "$sanitizer" != none ]; then
    flags+=" -Zsanitizer=$sanitizer"
    export RUSTC_BOOTSTRAP=1
fi
# An explicit target: RUSTFLAGS then apply to the fuzz targets and their dependencies, not to
# build scripts and proc macros (which libFuzzer's hooks would break).
host="$(rustc -vV | sed -n 's/^host: //p')"
echo "== $(rustc --version), $host, sanitizer $sanitizer"

max_len() {
    case "$1" in
        decode_segment) echo 20480 ;; # up to 5 pages: segments of 4 KiB .. 20 KiB
        recover_image) echo 256 ;;    # 3 + 40 record lengths + 64 corruptions of 3 bytes
        *) echo 4096 ;;
    esac
}

start=$(date +%s)
echo "== building ${targets[*]}"
bins=()
for t in "${targets[@]}"; do
    bins+=(--bin "$t")
done
RUSTFLAGS="$flags" cargo build --release --target "$host" "${bins[@]}"
echo "== built in $(( $(date +%s) - start )) s"

# The targets run side by side (libFuzzer runs one on one core), each for SECONDS.
pids=()
# A fuzzer left running when this script ends early is stopped.
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
for t in "${targets[@]}"; do
    mkdir -p "work/corpus/$t" "artifacts/$t"
    echo "== fuzzing $t for $secs s"
    # The first corpus directory receives new inputs; corpus/$t (the committed seeds) is only read.
    # Crash reproducers go to artifacts/$t/, where cargo-fuzz puts them.
    # libFuzzer's progress lines go to work/$t.log; the final stats (or the crash) are shown.
    "target/$host/release/$t" "work/corpus/$t" "corpus/$t" -artifact_prefix="artifacts/$t/" \
        -max_total_time="$secs" -max_len="$(max_len "$t")" -timeout=20 \
        -rss_limit_mb=4096 -print_final_stats=1 >"work/$t.log" 2>&1 &
    pids+=($!)
done
failed=()
for i in "${!targets[@]}"; do
    t="${targets[$i]}"
    if wait "${pids[$i]}"; then
        echo "== $t:"
        grep -E '^(stat::|Done )' "work/$t.log" || tail -n 5 "work/$t.log"
    else
        tail -n 60 "work/$t.log" >&2
        failed+=("$t")
        echo "== $t FAILED: reproducer in fuzz/artifacts/$t/" >&2
    fi
done

echo "== total $(( $(date +%s) - start )) s"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "== crashed: ${failed[*]}" >&2
    exit 1
fi
echo "== no crash in ${targets[*]}"
