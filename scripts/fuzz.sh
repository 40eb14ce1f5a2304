#!/usr/bin/env bash
# Runs each named fuzz target for SECONDS seconds and prints what libFuzzer reports at the end
# (executions, executions per second, coverage). The corpus grows under fuzz/corpus/<target>
# (not committed), so later runs start from what earlier ones found.
# Usage: scripts/fuzz.sh SECONDS TARGET...
set -euo pipefail
seconds=$1
shift
cd "$(dirname "$0")/../fuzz"
flags=(-rss_limit_mb=2048 -malloc_limit_mb=512 -timeout=10 -max_total_time="$seconds" -print_final_stats=1)
# The instrumentation cargo-fuzz would add with `--sanitizer none` (coverage counters and
# comparison tracing, which are stable rustc flags), set here directly so that no extra tool
# has to be installed. An explicit --target keeps build scripts and proc macros uninstrumented.
triple=$(rustc -vV | sed -n 's/^host: //p')
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Cforce-frame-pointers"
bins=()
for t in "$@"; do bins+=(--bin "$t"); done
cargo build --release --target "$triple" "${bins[@]}"
for t in "$@"; do
  mkdir -p "corpus/$t"
  echo "== fuzz $t for ${seconds}s"
  log=$(mktemp)
  mkdir -p "artifacts/$t"
  if ! "target/$triple/release/$t" "${flags[@]}" -artifact_prefix="artifacts/$t/" "corpus/$t" >"$log" 2>&1; then
    tail -60 "$log"
    echo "fuzz $t FAILED; the input is under fuzz/artifacts/$t/ (replay: fuzz/target/$triple/release/$t <file>)"
    rm -f "$log"
    exit 1
  fi
  grep -E '^#[0-9]+.*DONE|stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb' "$log" || tail -5 "$log"
  grep -Eo 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 | sed 's/^/final /'
  rm -f "$log"
done
