#!/usr/bin/env bash
# Records the sha256 of rsend's full stream of every read-only snapshot of
# every testdata/images fixture, as `rsend -d DEV... --subvolid ID` writes it,
# into testdata/rsend-full.sha256. No root needed.
#
# This pins rsend's output across refactors that must not change a byte
# (the test crates/send/tests/stream_digests.rs compares against it). It says
# nothing about correctness by itself: that is checked against the kernel and
# btrfs-progs by crates/send/tests/send_kernel.rs (byte for byte where the
# kernel clones nothing) and send_fixtures.rs (manifests). Rerun it only when
# a change to the streams is intended, and say so in the commit.
#
# Usage: testdata/make-rsend-digests.sh [RSEND]  (default target/release/rsend)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rsend=${1:-$here/../target/release/rsend}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$here/rsend-full.sha256
{
    echo "# sha256 of rsend's full stream per fixture snapshot; made by testdata/make-rsend-digests.sh"
    for dir in "$here"/images/*/; do
        name=$(basename "$dir")
        [ -f "$dir/INFO" ] || continue
        ro=$(sed -n 's/^ro_subvolumes=//p' "$dir/INFO" | tr ',' ' ')
        [ -n "$ro" ] || continue
        args=()
        for img in "$dir"/dev*.img.zst; do
            zstd -q -d --sparse -f "$img" -o "$tmp/$(basename "$img" .zst)"
            args+=(-d "$tmp/$(basename "$img" .zst)")
        done
        for id in $ro; do
            sum=$("$rsend" "${args[@]}" -q --subvolid "$id" -f "$tmp/s" && sha256sum <"$tmp/s" | cut -d' ' -f1)
            echo "$sum  $name/subvol-$id"
        done
        rm -f "$tmp"/*.img
    done
} >"$out.new"
mv "$out.new" "$out"
echo "wrote $out ($(grep -vc '^#' "$out") streams)"
