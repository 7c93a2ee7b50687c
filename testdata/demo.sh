#!/usr/bin/env bash
# Demo on bundled data, no kernel help: read a snapshot straight from a btrfs
# image (rsend), print the stream (rdump), replay it into a plain directory
# (rreceive), and check the result against the snapshot's manifest.
#
# RSEND_BINDIR=/usr/bin runs it on installed tools (the packages) instead
# of building them.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in zstd getfattr setfattr python3; do
    if ! command -v "$tool" >/dev/null; then
        echo "demo.sh: needs $tool (Debian: apt-get install zstd attr python3)" >&2
        exit 1
    fi
done
if [ -n "${RSEND_BINDIR:-}" ]; then
    bin=$RSEND_BINDIR
    echo "== the tools installed in $bin"
else
    # The minimum Rust version is the workspace's rust-version.
    need=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' Cargo.toml)
    if ! command -v cargo >/dev/null; then
        echo "demo.sh: needs cargo, from Rust $need or newer (https://rustup.rs, or Debian's cargo where it is new enough)" >&2
        exit 1
    fi
    have=$(cargo --version | awk '{print $2}')
    if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n1)" != "$need" ]; then
        echo "demo.sh: needs Rust $need or newer; cargo is $have (rustup update, or https://rustup.rs)" >&2
        exit 1
    fi
    if ! command -v cc >/dev/null && ! command -v gcc >/dev/null && ! command -v clang >/dev/null; then
        echo "demo.sh: needs a C compiler to build zstd (Debian: apt-get install build-essential)" >&2
        exit 1
    fi
    # The root is a plain workspace: this builds rsend, rreceive and rdump
    # (a few minutes the first time).
    echo "== cargo build --release (rsend, rreceive, rdump)"
    cargo build --release
    bin=target/release
fi
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
