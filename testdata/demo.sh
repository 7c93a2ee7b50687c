#!/usr/bin/env bash
# Demo on bundled data, no kernel help: read a snapshot straight from a btrfs
# image (rsend), print the stream (rdump), replay it into a plain directory
# (rreceive), and check the result against the snapshot's manifest.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in zstd getfattr setfattr python3; do
    if ! command -v "$tool" >/dev/null; then
        echo "demo.sh: needs $tool (Debian: apt-get install zstd attr python3)" >&2
        exit 1
    fi
done
# The root is a plain workspace: this builds rsend, rreceive and rdump.
cargo build --release -q
bin=target/release
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

img=testdata/images/csum-crc32c
zstd -dq "$img/dev1.img.zst" -o "$work/dev1.img"

echo "== rsend --list (same text as btrfs subvolume list -p -u -q -R)"
"$bin/rsend" -d "$work/dev1.img" --list

echo "== rsend snap1 > snap1.stream"
"$bin/rsend" -q -d "$work/dev1.img" snap1 -f "$work/snap1.stream"

echo "== rdump snap1.stream (first lines; same text as btrfs receive --dump)"
TZ=UTC "$bin/rdump" "$work/snap1.stream" | head -n 12
echo "== rdump --summary"
"$bin/rdump" --summary "$work/snap1.stream"

echo "== rreceive into a plain directory"
mkdir "$work/dest"
"$bin/rreceive" -f "$work/snap1.stream" "$work/dest"
# rreceive's own record of the received subvolume is not part of the snapshot.
getfattr --absolute-names -n user.rreceive.subvol --only-values "$work/dest/snap1"
setfattr -x user.rreceive.subvol "$work/dest/snap1"
python3 testdata/manifest.py "$work/dest/snap1" >"$work/received.manifest"
if cmp -s "$work/received.manifest" "$img/subvol-257.manifest"; then
    echo "received tree matches the snapshot's manifest (content, modes, owners, times, xattrs, links)"
else
    echo "received tree differs from the snapshot's manifest:"
    diff "$img/subvol-257.manifest" "$work/received.manifest" | head -n 20
    exit 1
fi
