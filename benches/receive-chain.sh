#!/bin/bash
# Benchmark an incremental receive off btrfs in each way rreceive makes the
# snapshot: a copy of the parent (the default), --in-place and --link, on
# ext4, next to a real snapshot on btrfs (btrfs receive and rreceive), in
# one run. The kernel's streams of benches/smalltree.py's tree: 100,000
# small files (s0, sent in full) and the change to s1 (100 files
# rewritten, 5 deleted, 5 created, two directories moved), sent with -p s0.
#
# Usage: sudo benches/receive-chain.sh
#
# Goals (issue 15): on ext4, --in-place at most 0.5 s and --link at most
# 3 s for the incremental.
#
# Environment (all optional):
#   FILES=100000   files in the tree
#   RUNS=3         timed incremental receives per row (each onto a new
#                  filesystem holding s0, received untimed first)
#   IMG_DIR=/var/tmp/rsend-bench-incremental
#                  where the source image is kept between runs (shared with
#                  benches/incremental.sh)
#   RESULTS_DIR=   copy the table and the per-run times here
#   TMPDIR=/tmp    scratch space (the destination images: ~3 GB, sparse)
#
# Each row: mkfs a new destination, receive s0 (timed once: "full"), sync,
# drop caches except the streams', then receive s1 (timed: "incremental",
# RUNS times on a new destination each). A receive by rreceive ends with the
# filesystem synced (syncfs), so its time includes writing everything out;
# btrfs receive's does not, so its rows get a `sync` in the timed command.
# "Space after" is the destination's used bytes and inodes after both
# receives, and what the incremental added. Before timing, each row's s1 is
# compared with the one btrfs receive made (testdata/manifest.py, without
# link counts).
set -euo pipefail
BENCH=receive-chain.sh
# shellcheck source=benches/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

FILES=${FILES:-100000}
RUNS=${RUNS:-3}
IMG_DIR=${IMG_DIR:-/var/tmp/rsend-bench-incremental}
RESULTS_DIR=${RESULTS_DIR:-}
(( RUNS >= 1 )) || die "RUNS must be at least 1"
for t in btrfs mkfs.btrfs mkfs.ext4 losetup python3; do
    command -v "$t" >/dev/null || die "$t not found"
done
cargo_release rreceive
RRECEIVE="$TARGET_DIR/release/rreceive"
[[ -x $RRECEIVE ]] || die "$RRECEIVE was not built"

scratch_dir rreceive-chain-bench
SRC="$TMP/src"
DST="$TMP/dst"
mkdir "$SRC" "$DST"
scratch_mount "$SRC"
scratch_mount "$DST"

smalltree_image "$FILES" "$SRC"
IMG=$(smalltree_image_path "$FILES")
loop_mount "$IMG" "$SRC" ro
log "kernel streams: s0 in full, s0 -> s1"
btrfs send -q -f "$TMP/full.stream" "$SRC/s0"
btrfs send -q -p "$SRC/s0" -f "$TMP/incr.stream" "$SRC/s1"
loop_umount "$SRC"
echo "streams: full $(stat -c %s "$TMP/full.stream") bytes, incremental $(stat -c %s "$TMP/incr.stream") bytes" >&2

# new_dest FSTYPE: a new filesystem on $DST (3 GiB sparse image); ext4 as
# mkfs.ext4 makes it (about 196,000 inodes), ext4-N with 400,000 inodes.
new_dest() {
    local img="$TMP/dst.img"
    if mountpoint -q "$DST"; then loop_umount "$DST"; fi
    rm -f "$img"
    truncate -s 3G "$img"
    case $1 in
        btrfs) mkfs.btrfs -q -f "$img" >/dev/null ;;
        ext4) mkfs.ext4 -q -F "$img" >/dev/null ;;
        ext4-N) mkfs.ext4 -q -F -N 400000 "$img" >/dev/null ;;
    esac
    loop_mount "$img" "$DST"
}

# secs CMD...: runs CMD, prints its wall time in seconds, and FAILED after
# it when CMD failed (its standard error then goes to $TMP/failed.err).
secs() {
    local t0=$EPOCHREALTIME rc=0
    "$@" >/dev/null 2>"$TMP/failed.err" || rc=$?
    awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }'
    if (( rc != 0 )); then echo " FAILED"; fi
}

drop_caches() { # keeps the streams cached: they stand for the network
    sync
    echo 3 >/proc/sys/vm/drop_caches
    cat "$TMP/full.stream" "$TMP/incr.stream" >/dev/null
}

used() { df -B1 --output=used "$DST" | tail -1 | tr -d ' '; }
iused() { df --output=iused "$DST" | tail -1 | tr -d ' '; }

recv_btrfs() { btrfs receive -q -f "$1" "$DST" && sync; }
recv_rr() { local s=$1; shift; "$RRECEIVE" -q "$@" -f "$s" "$DST"; }

# The reference s1, for the checks.
new_dest btrfs
recv_btrfs "$TMP/full.stream"
recv_btrfs "$TMP/incr.stream"
# Link counts left out (--link shares inodes with s0), and rreceive's own
# state xattr on the root.
manifest() {
    python3 "$REPO/testdata/manifest.py" "$1" | cut -f1-5,7- |
        sed -E 's/user\.rreceive\.subvol=[0-9a-f]*//; s/\t;/\t/; s/;\t/\t/; s/\t\t/\t-\t/'
}
manifest "$DST/s1" >"$TMP/want.manifest"

ROWS=()
# row NAME FSTYPE RECEIVER [ARGS...]
row() {
    local name=$1 fstype=$2 how=$3 full incr times=() u0 u1 i0 i1 u2 i2
    shift 3
    log "$name"
    new_dest "$fstype"
    drop_caches
    if [[ $how == btrfs ]]; then
        full=$(secs recv_btrfs "$TMP/full.stream")
    else
        full=$(secs recv_rr "$TMP/full.stream" "$@")
    fi
    for ((r = 0; r < RUNS; r++)); do
        if (( r > 0 )); then
            new_dest "$fstype"
            if [[ $how == btrfs ]]; then recv_btrfs "$TMP/full.stream"; else recv_rr "$TMP/full.stream"; fi
        fi
        sync
        u0=$(used); i0=$(iused)
        drop_caches
        if [[ $how == btrfs ]]; then
            times+=("$(secs recv_btrfs "$TMP/incr.stream")")
        else
            times+=("$(secs recv_rr "$TMP/incr.stream" "$@")")
        fi
        sync
        u1=$(used); i1=$(iused)
        if [[ ${times[-1]} == *FAILED ]]; then
            local why
            why=$(grep -o 'too few inodes\|too little space' "$TMP/failed.err" | head -1 || true)
            ROWS+=("| $name | $full s | fails at once: ${why:-error} (after ${times[-1]% FAILED} s, nothing copied) | | |")
            sed 's/^/   /' "$TMP/failed.err" >&2
            echo "${ROWS[-1]}" >&2
            return
        fi
    done
    manifest "$DST/s1" >"$TMP/got.manifest"
    cmp -s "$TMP/want.manifest" "$TMP/got.manifest" || { diff "$TMP/want.manifest" "$TMP/got.manifest" | head -6 | cut -c1-300 >&2; false; } ||
        die "$name: s1 differs from btrfs receive's (diff $TMP/want.manifest $TMP/got.manifest)"
    u2=$(( (u1 - u0) )); i2=$(( i1 - i0 ))
    ROWS+=("$(python3 - "$name" "$full" "$u1" "$i1" "$u2" "$i2" "${times[@]}" <<'PY'
import statistics, sys
name, full, used, iused, du, di = sys.argv[1:7]
t = [float(x) for x in sys.argv[7:]]
mib = lambda b: f"{int(b) / 2**20:.0f} MiB"
ino = lambda n, plus="": "" if name.startswith("btrfs") else f", {plus}{int(n):,} inodes"
print(f"| {name} | {float(full):.2f} s | **{statistics.median(t):.2f} s** ({min(t):.2f}-{max(t):.2f}) "
      f"| {mib(used)}{ino(iused)} | +{mib(du)}{ino(di, '+')} |")
PY
)")
    echo "${ROWS[-1]}" >&2
}

row "btrfs, btrfs receive (snapshot)" btrfs btrfs
row "btrfs, rreceive (snapshot)" btrfs rr
row "ext4, rreceive (copy of the parent)" ext4 rr
row "ext4 -N 400000, rreceive (copy of the parent)" ext4-N rr
row "ext4, rreceive --in-place" ext4 rr --in-place
row "ext4, rreceive --link" ext4 rr --link

{
    echo "$(machine_line)"
    echo "$FILES files; kernel streams: full $(stat -c %s "$TMP/full.stream") B, incremental $(stat -c %s "$TMP/incr.stream") B; $RUNS incremental runs per row (median, min-max)"
    echo
    echo "| destination | full receive | incremental receive | space after both | the incremental added |"
    echo "|---|---|---|---|---|"
    printf '%s\n' "${ROWS[@]}"
} | tee "$TMP/table.md"
if [[ -n $RESULTS_DIR ]]; then
    mkdir -p "$RESULTS_DIR"
    cp "$TMP/table.md" "$RESULTS_DIR/receive-chain.md"
fi
