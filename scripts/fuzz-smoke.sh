#!/usr/bin/env bash
# Fuzz smoke for CI: builds the fuzz targets in fuzz/ (cargo-fuzz, libFuzzer),
# replays every committed corpus input once, then fuzzes each target briefly
# (FUZZ_SMOKE_SECONDS each, default 10) from its corpus. Any crash, panic,
# 500 answer or broken invariant fails the run; libFuzzer leaves the input in
# fuzz/artifacts/<target>/ (replay it with
# `cargo fuzz run -s none -a <target> <file>`). New inputs found by the smoke
# go to a temporary directory, never into the committed corpora.
# Works on a fresh machine as root: installs the pinned cargo-fuzz if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_FUZZ_VERSION=0.13.2
if [ "${FUZZ_SMOKE:-1}" = 0 ]; then
  echo "fuzz-smoke: skipped (FUZZ_SMOKE=0)"
  exit 0
fi
SECONDS_PER_TARGET=${FUZZ_SMOKE_SECONDS:-10}
# Without a sanitizer (-s none, below) cargo-fuzz passes only stable rustc
# flags (sancov instrumentation, --cfg fuzzing), so the stable toolchain does.

if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
  echo "fuzz-smoke: installing cargo-fuzz $CARGO_FUZZ_VERSION"
  cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi

# -s none: the code under test is safe Rust (unsafe_code is forbidden), so
# AddressSanitizer would only slow it down; -a: debug assertions and overflow
# checks on, so an arithmetic overflow is a crash rather than a wrap;
# 16 codegen units: cargo-fuzz's default of 1 makes the cold build several
# times slower, which a 10 s smoke per target does not win back (campaigns
# use the default; see docs/guide/fuzzing.md).
FLAGS=(-s none -a --codegen-units "${FUZZ_CODEGEN_UNITS:-16}")
cargo fuzz build "${FLAGS[@]}"

targets=$(cargo fuzz list)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
n=0
for t in $targets; do
  corpus="fuzz/corpus/$t"
  [ -d "$corpus" ] || { echo "fuzz-smoke: $t has no committed corpus ($corpus)" >&2; exit 1; }
  echo "fuzz-smoke: $t: replaying $(ls "$corpus" | wc -l) corpus inputs"
  if ! cargo fuzz run "${FLAGS[@]}" "$t" "$corpus" -- -runs=0 -rss_limit_mb=4096 >"$scratch/$t.replay" 2>&1; then
    tail -n 60 "$scratch/$t.replay" >&2
    echo "fuzz-smoke: $t failed on a committed corpus input" >&2
    exit 1
  fi
  echo "fuzz-smoke: $t: fuzzing ${SECONDS_PER_TARGET}s"
  mkdir -p "$scratch/$t"
  log="$scratch/$t.log"
  if ! cargo fuzz run "${FLAGS[@]}" "$t" "$scratch/$t" "$corpus" -- \
    -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=4096 -print_final_stats=1 >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    echo "fuzz-smoke: $t failed (input saved under fuzz/artifacts/$t/)" >&2
    exit 1
  fi
  grep -E '^stat::number_of_executed_units' "$log" | sed "s/^/fuzz-smoke: $t: /"
  n=$((n + 1))
done
echo "fuzz-smoke: every corpus replayed and each target fuzzed ${SECONDS_PER_TARGET}s"
echo "fuzz: $n passed, 0 failed"
