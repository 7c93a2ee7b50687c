#!/usr/bin/env bash
# Demo on bundled data: dump and summarize a kernel-made send stream.
# (rsend and rreceive join this demo as they land.)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q
stream=testdata/kernel/full-v1.stream
echo "== rdump $stream (first lines; same text as btrfs receive --dump)"
TZ=UTC target/release/rdump "$stream" | head -n 12
echo "== rdump --summary $stream"
target/release/rdump --summary "$stream"
echo "== rdump --json (one line)"
target/release/rdump --json "$stream" | sed -n 5p
