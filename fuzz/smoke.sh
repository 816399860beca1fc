#!/usr/bin/env bash
# CI smoke for the fuzz targets (called by `cargo xtask ci`; runnable by hand from anywhere).
#
# 1. replays every committed corpus file and every fuzz/artifacts-regressions/ input through the
#    targets' entry points on stable (`cargo test -p modu-fuzz-harness`);
# 2. builds every libFuzzer target once (nightly, cargo-fuzz; installed when missing);
# 3. runs each target for FUZZ_SECONDS (default 60) on its committed corpus with a 256 MiB RSS
#    limit and a 10 s per-input timeout, new inputs going to a scratch folder (the committed
#    corpus is read only), and prints each target's execution count.
#
# Fails when any step fails: a crash, a failed property, a hang (timeout) or an out-of-memory in
# any target. Findings are kept under $FUZZ_WORK/artifacts/<target>/ (default: a temporary
# folder, printed, and removed when every target passed). Honours CARGO_TARGET_DIR (default:
# fuzz/target).
#
# Environment: FUZZ_SECONDS (60), FUZZ_TARGETS (space-separated subset; default all),
# FUZZ_TOOLCHAIN (nightly), FUZZ_WORK (scratch folder), FUZZ_SKIP_REPLAY=1.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
seconds="${FUZZ_SECONDS:-60}"
toolchain="${FUZZ_TOOLCHAIN:-nightly}"
all_targets="openai_sse ollama_ndjson tool_arguments checkpoint skill_front_matter mcp_tool_result modu_toml"
targets="${FUZZ_TARGETS:-$all_targets}"
if [ -n "${FUZZ_WORK:-}" ]; then
    work="$FUZZ_WORK"
    own_work=0
else
    work="$(mktemp -d -t modu-fuzz-smoke.XXXXXX)"
    own_work=1
fi
# Targets that need a file (modu_toml, in the replay and the fuzz runs) write it to the
# temporary folder: this scratch folder's, so it goes with it (a target stopped by
# -max_total_time cannot remove its file).
mkdir -p "$work/tmp"
export TMPDIR="$work/tmp"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$here/target}"
export CARGO_INCREMENTAL=0
# The sanitizer-free build: safe Rust needs no ASan to find panics, overflows (debug assertions
# are on), hangs and OOMs, and it builds and runs several times faster.
build_flags=(--sanitizer none)

started=$(date +%s)
echo "fuzz smoke: targets: $targets; ${seconds}s each; CARGO_TARGET_DIR=$CARGO_TARGET_DIR; work: $work"

if ! cargo "+$toolchain" --version >/dev/null 2>&1; then
    echo "fuzz smoke: the $toolchain toolchain is missing (rustup toolchain list)" >&2
    exit 1
fi
if ! cargo "+$toolchain" fuzz --version >/dev/null 2>&1; then
    echo "fuzz smoke: installing cargo-fuzz"
    cargo install cargo-fuzz --locked --version 0.13.2
fi

if [ "${FUZZ_SKIP_REPLAY:-0}" != 1 ]; then
    echo "fuzz smoke: replaying the corpora and regression inputs (stable)"
    cargo test --manifest-path "$here/Cargo.toml" -p modu-fuzz-harness --test regressions
fi

cd "$root"
echo "fuzz smoke: building the targets"
cargo "+$toolchain" fuzz build "${build_flags[@]}"

failed=()
summary=()
for t in $targets; do
    mkdir -p "$work/corpus/$t" "$work/artifacts/$t"
    dict=()
    [ -f "$here/dict/$t.dict" ] && dict=("-dict=$here/dict/$t.dict")
    log="$work/$t.log"
    echo "fuzz smoke: $t for ${seconds}s"
    set +e
    cargo "+$toolchain" fuzz run "${build_flags[@]}" "$t" "$work/corpus/$t" "$here/corpus/$t" -- \
        -max_total_time="$seconds" -rss_limit_mb=256 -timeout=10 \
        -print_final_stats=1 -artifact_prefix="$work/artifacts/$t/" "${dict[@]}" >"$log" 2>&1
    rc=$?
    set -e
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    line="$t: ${execs:-?} executions (${rate:-?}/s), exit $rc"
    summary+=("$line")
    echo "fuzz smoke: $line"
    if [ "$rc" -ne 0 ]; then
        failed+=("$t")
        echo "---- last lines of $log ----" >&2
        tail -40 "$log" >&2
        ls -l "$work/artifacts/$t" >&2 || true
    fi
done

elapsed=$(( $(date +%s) - started ))
echo "fuzz smoke: summary (${elapsed}s in all)"
printf '  %s\n' "${summary[@]}"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzz smoke: FAILED: ${failed[*]} (inputs in $work/artifacts/)" >&2
    exit 1
fi
# A scratch folder of our own holds only the run's new inputs and logs once every target
# passed: removed, so repeated runs do not fill /tmp (findings are kept: see above).
if [ "$own_work" = 1 ]; then
    rm -rf "$work"
fi
echo "fuzz smoke: ok"
