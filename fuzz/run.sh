#!/usr/bin/env bash
# A bounded fuzz run, as CI does it: builds the binary `all` (every target in one binary: one link
# instead of one per target), then runs each target through it for SECONDS (default 60) from its
# committed corpus, JOBS targets at a time (default: one per CPU; each target is one libFuzzer
# process, single-threaded, so each gets its SECONDS of a core). New inputs go to a scratch
# directory (the committed corpus stays as it is); a crash stops that target, keeps its input under
# fuzz/artifacts/<target>/ and fails the run after the others have run.
#
#   fuzz/run.sh [SECONDS [JOBS]]
#
# Needs cargo-fuzz (`cargo install --locked cargo-fuzz --version 0.13.2`). Builds on the stable
# toolchain without a sanitizer (`-s none`): skiff forbids `unsafe`, so AddressSanitizer (which
# needs nightly) would mostly watch dependencies; `cargo +nightly fuzz run <target>` runs one with
# it. Builds in $CARGO_TARGET_DIR/fuzz: its own directory, never the workspace's (a cargo inside a
# cargo on one target dir waits for the build lock forever).
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-60}
jobs=${2:-$(nproc)}
target_dir="${CARGO_TARGET_DIR:-$HOME/.cache/skiff-target}/fuzz"
triple=$(rustc -vV | sed -n 's/^host: //p')

start=$(date +%s)
cargo fuzz build -s none --codegen-units 16 --target-dir "$target_dir" all
built=$(date +%s)
echo "fuzz: built the targets in $((built - start)) s"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# One target: its log in $scratch/<target>.log, and $scratch/<target>.ok when it stopped on time.
fuzz_one() {
  local target=$1
  mkdir -p "$scratch/$target" "artifacts/$target"
  if SKIFF_FUZZ_TARGET=$target "$target_dir/$triple/release/all" "$scratch/$target" "corpus/$target" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
    -artifact_prefix="artifacts/$target/" -print_final_stats=1 2>"$scratch/$target.log"; then
    touch "$scratch/$target.ok"
  fi
}

targets=$(cargo fuzz list | grep -vx all)
running=0
for target in $targets; do
  if ((running >= jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$target" &
  running=$((running + 1))
done
wait

failed=()
total=0
for target in $targets; do
  log="$scratch/$target.log"
  if [[ -e "$scratch/$target.ok" ]]; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    total=$((total + ${runs:-0}))
    echo "fuzz: $target: ${runs:-?} executions in ${seconds} s, no crash"
  else
    tail -n 80 "$log"
    echo "fuzz: $target FAILED (input kept under fuzz/artifacts/$target/)"
    failed+=("$target")
  fi
done
echo "fuzz: $total executions; fuzzed $jobs at a time for $(($(date +%s) - built)) s; done in $(($(date +%s) - start)) s"
if ((${#failed[@]})); then
  echo "fuzz: crashes in ${failed[*]}" >&2
  exit 1
fi
