#!/usr/bin/env bash
# A bounded fuzz run, as CI does it: builds the binary `all` (every target in one binary: one link
# instead of one per target), then runs each target through it for SECONDS (default 15) from its
# committed corpus, one at a time. New inputs go to a scratch directory (the committed corpus stays
# as it is); a crash stops that target, keeps its input under fuzz/artifacts/<target>/ and fails
# the run after the others have run.
#
#   fuzz/run.sh [SECONDS]
#
# Needs cargo-fuzz (`cargo install --locked cargo-fuzz --version 0.13.2`). Builds on the stable
# toolchain without a sanitizer (`-s none`): skiff forbids `unsafe`, so AddressSanitizer (which
# needs nightly) would mostly watch dependencies; `cargo +nightly fuzz run <target>` runs one with
# it. Builds in $CARGO_TARGET_DIR/fuzz: its own directory, never the workspace's (a cargo inside a
# cargo on one target dir waits for the build lock forever).
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-15}
target_dir="${CARGO_TARGET_DIR:-$HOME/.cache/skiff-target}/fuzz"
triple=$(rustc -vV | sed -n 's/^host: //p')

start=$(date +%s)
cargo fuzz build -s none --codegen-units 16 --target-dir "$target_dir" all
built=$(date +%s)
echo "fuzz: built the targets in $((built - start)) s"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=()
for target in $(cargo fuzz list | grep -vx all); do
  mkdir -p "$scratch/$target" "artifacts/$target"
  log="$scratch/$target.log"
  if SKIFF_FUZZ_TARGET=$target "$target_dir/$triple/release/all" "$scratch/$target" "corpus/$target" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
    -artifact_prefix="artifacts/$target/" -print_final_stats=1 2>"$log"; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "fuzz: $target: ${runs:-?} executions in ${seconds} s, no crash"
  else
    tail -n 80 "$log"
    echo "fuzz: $target FAILED (input kept under fuzz/artifacts/$target/)"
    failed+=("$target")
  fi
done
echo "fuzz: done in $(($(date +%s) - start)) s"
if ((${#failed[@]})); then
  echo "fuzz: crashes in ${failed[*]}" >&2
  exit 1
fi
