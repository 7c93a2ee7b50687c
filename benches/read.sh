#!/bin/bash
# Benchmark rsend's offline reader: warm-cache read of one large file with
# checksum verification, next to `cat` of the same file on the mounted
# filesystem, in one run.
#
# Usage: sudo benches/read.sh
#
# Environment (all optional):
#   SIZE_MB=1024   size of the file (pseudo-random data), MiB
#   RUNS=10        hyperfine runs per command (at least 3)
#   CSUM=crc32c    mkfs.btrfs --csum (crc32c, xxhash, sha256, blake2)
#   MKFS_ARGS=     extra mkfs.btrfs arguments
#   TMPDIR=/tmp    where the scratch directory goes (needs ~2*SIZE_MB free)
#
# What it does, in a mktemp -d directory that is unmounted, detached and
# removed on exit (also on failure): builds rsend (release), makes a
# loop-mounted btrfs image, writes the file, syncs, checks that
# `rsend --cat-file` prints exactly the bytes `cat` does, warms both page
# caches (the mounted file's and the image file's), then times with
# hyperfine (--warmup 1):
#   cat MNT/vol/big > /dev/null
#   rsend -d IMAGE --cat-file vol big > /dev/null
# and prints MB/s for each (1 MB = 10^6 bytes) on a SUMMARY line.
# rsend reads the image file (memory-mapped, page cache warm) while the
# filesystem is still mounted; after `sync` the image holds the committed
# state, which is all rsend looks at.
set -euo pipefail

if [[ $EUID -ne 0 ]]; then
    echo "read.sh: must run as root (sudo benches/read.sh)" >&2
    exit 1
fi
export LC_ALL=C
SIZE_MB=${SIZE_MB:-1024}
RUNS=${RUNS:-10}
CSUM=${CSUM:-crc32c}
MKFS_ARGS=${MKFS_ARGS:-}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RSEND="$REPO/target/release/rsend"

log() { echo "== $*" >&2; }
die() { echo "read.sh: ERROR: $*" >&2; exit 1; }
for t in btrfs mkfs.btrfs losetup hyperfine jq cmp python3; do
    command -v "$t" >/dev/null || die "$t not found"
done
(( RUNS >= 3 )) || die "RUNS must be at least 3"

log "building rsend (release)"
if [[ -n ${SUDO_USER:-} && $SUDO_USER != root ]]; then
    sudo -u "$SUDO_USER" -H bash -lc "cd '$REPO' && cargo build --release -p rsend" >&2
else
    (cd "$REPO" && cargo build --release -p rsend) >&2
fi
[[ -x $RSEND ]] || die "$RSEND was not built"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/rsend-read-bench.XXXXXX")
IMG="$TMP/fs.img"
MNT="$TMP/mnt"
LOOP=
cleanup() {
    local rc=$?
    set +e
    cd /
    if mountpoint -q "$MNT" 2>/dev/null; then
        umount "$MNT" || { sleep 1; umount "$MNT"; } || umount -l "$MNT"
    fi
    [[ -n $LOOP ]] && losetup -d "$LOOP" 2>/dev/null
    if grep -qF " $TMP/" /proc/self/mounts; then
        echo "read.sh: WARNING: something is still mounted under $TMP, not removing it" >&2
    else
        rm -rf "$TMP"
    fi
    [[ $rc -ne 0 ]] && echo "read.sh: FAILED (exit $rc)" >&2
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

IMG_MB=$((SIZE_MB * 3 / 2 + 512))
log "making a ${IMG_MB} MiB btrfs image (--csum $CSUM $MKFS_ARGS)"
truncate -s "${IMG_MB}M" "$IMG"
# shellcheck disable=SC2086
mkfs.btrfs -q -f --csum "$CSUM" $MKFS_ARGS "$IMG" >/dev/null
LOOP=$(losetup --find --show "$IMG")
mkdir "$MNT"
mount -o noatime "$LOOP" "$MNT"
btrfs subvolume create "$MNT/vol" >/dev/null
F="$MNT/vol/big"

log "writing $SIZE_MB MiB of pseudo-random data"
python3 - "$F" "$SIZE_MB" <<'PY'
import random, sys
path, mb = sys.argv[1], int(sys.argv[2])
r = random.Random(20240601)
with open(path, "wb") as f:
    for _ in range(mb):
        f.write(r.randbytes(1 << 20))
PY
sync
BYTES=$(stat -c %s "$F")

log "checking that rsend prints the same bytes as cat"
cmp <("$RSEND" -d "$IMG" --cat-file vol big) "$F" || die "rsend output differs from the file"

log "warming the page caches"
cat "$F" >/dev/null
cat "$IMG" >/dev/null
"$RSEND" -d "$IMG" --cat-file vol big >/dev/null

log "hyperfine"
hyperfine --warmup 1 --runs "$RUNS" --style basic --export-json "$TMP/read.json" \
    -n "cat (mounted btrfs)" "cat '$F' >/dev/null" \
    -n "rsend --cat-file (image, csum verified)" "'$RSEND' -d '$IMG' --cat-file vol big >/dev/null"

mbps() { jq -r ".results[$1] | ($BYTES / .mean / 1e6 | round)" "$TMP/read.json"; }
ms() { jq -r ".results[$1] | \"\\(.mean * 1000 | round) ± \\(.stddev * 1000 | round) ms\"" "$TMP/read.json"; }
echo
echo "machine: nproc $(nproc); $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo); kernel $(uname -r); $(btrfs --version | head -1)"
echo "file: $BYTES bytes, csum $CSUM"
echo "SUMMARY: cat $(mbps 0) MB/s ($(ms 0)); rsend $(mbps 1) MB/s ($(ms 1)); goal >= 1000 MB/s"
