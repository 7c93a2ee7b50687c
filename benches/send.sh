#!/bin/bash
# Benchmark `rsend` (full send from the image file, no kernel) against the
# kernel's `btrfs send` of the same snapshot, on the same image mounted
# read-only, in one run, warm cache, both to /dev/null.
#
# Usage: sudo benches/send.sh
#
# Two trees, each on its own btrfs image:
#   mixed  large random files (BIG_MB MiB in five files) + MIXED_SMALL small
#          files (0-8 KiB, nested dirs, a symlink every 50th, a hard link
#          every 100th); the stream is >= 500 MB.      goal: <= 0.5 x kernel
#   small  SMALL_FILES small files (0-8 KiB, 1000 dirs).  goal: <= 0.25 x kernel
#
# Environment (all optional):
#   RUNS=5              hyperfine runs per command (at least 3)
#   BIG_MB=550          large files of the mixed tree, MiB
#   MIXED_SMALL=20000   small files of the mixed tree
#   SMALL_FILES=100000  files of the small-files tree
#   ONLY=               "mixed" or "small" to run one tree only
#   RESULTS_DIR=        copy the hyperfine exports and the summary here
#   TMPDIR=/tmp         scratch space (needs about 3 GB)
#
# For each tree: mkfs.btrfs on a sparse image, loop mount, populate, take a
# read-only snapshot `snap`, unmount; then attach the image read-only and
# mount it `-o ro` for the kernel side. rsend reads the image file itself
# (memory-mapped; the loop device reads the same file, so both share its
# page cache). Before timing: both streams are made once and compared with
# cmp (the trees have no shared extents, so rsend's stream must be the
# kernel's byte for byte), the image and the kernel's caches are warmed.
# Then hyperfine (--warmup 1) times
#   btrfs send -q MNT/snap > /dev/null
#   rsend -q -d IMAGE snap > /dev/null
# and /usr/bin/time -v gives each one's peak RSS (btrfs send's is the
# btrfs-progs process only; the kernel's memory is not counted). A
# SUMMARY line per tree gives the ratio rsend/kernel by mean.
# Everything happens in a mktemp -d directory that is unmounted, detached
# and removed on exit, also on failure.
set -euo pipefail

if [[ $EUID -ne 0 ]]; then
    echo "send.sh: must run as root (sudo benches/send.sh)" >&2
    exit 1
fi
export LC_ALL=C
umask 022

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RSEND="$REPO/target/release/rsend"
RUNS=${RUNS:-5}
BIG_MB=${BIG_MB:-550}
MIXED_SMALL=${MIXED_SMALL:-20000}
SMALL_FILES=${SMALL_FILES:-100000}
ONLY=${ONLY:-}
RESULTS_DIR=${RESULTS_DIR:-}

log() { echo "== $*" >&2; }
die() { echo "send.sh: ERROR: $*" >&2; exit 1; }
(( RUNS >= 3 )) || die "RUNS must be at least 3"

need_pkg() { # need_pkg COMMAND PACKAGE
    if ! command -v "$1" >/dev/null 2>&1 && [[ ! -x $1 ]]; then
        log "installing $2"
        apt-get install -y -q "$2" >/dev/null ||
            { apt-get update -q >/dev/null && apt-get install -y -q "$2" >/dev/null; } ||
            die "cannot install $2"
    fi
}
need_pkg /usr/bin/time time
need_pkg jq jq
need_pkg hyperfine hyperfine
for t in btrfs mkfs.btrfs losetup perl cmp; do
    command -v "$t" >/dev/null || die "$t not found"
done

log "building rsend (release)"
if [[ -n ${SUDO_USER:-} && $SUDO_USER != root ]]; then
    sudo -u "$SUDO_USER" -H bash -lc "cd '$REPO' && cargo build --release -p rsend" >&2
else
    (cd "$REPO" && cargo build --release -p rsend) >&2
fi
[[ -x $RSEND ]] || die "$RSEND was not built"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/rsend-send-bench.XXXXXX")
MNT="$TMP/mnt"
mkdir "$MNT"
cleanup() {
    local rc=$? dev img
    set +e
    cd /
    if mountpoint -q "$MNT" 2>/dev/null; then
        umount "$MNT" || { sleep 1; umount "$MNT"; } || umount -l "$MNT"
    fi
    for img in "$TMP"/*.img; do
        [[ -e $img ]] || continue
        for dev in $(losetup -n -O NAME -j "$img" 2>/dev/null); do
            losetup -d "$dev"
        done
    done
    if grep -qF " $TMP/" /proc/self/mounts; then
        echo "send.sh: WARNING: something is still mounted under $TMP, not removing it" >&2
    else
        rm -rf "$TMP"
    fi
    [[ $rc -ne 0 ]] && echo "send.sh: FAILED (exit $rc)" >&2
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# small_files ROOT COUNT DIRS_A DIRS_B LINKS: COUNT files of 0-8 KiB random
# data in ROOT/dAA/eBB; with LINKS=1 a symlink every 50th, a hard link every 100th.
small_files() {
    perl -e '
        use strict; use warnings;
        my ($root, $n, $da, $db, $links) = @ARGV;
        srand(20240601);
        open(my $rnd, "<:raw", "/dev/urandom") or die "urandom: $!";
        for my $i (0 .. $n - 1) {
            my $d = sprintf("%s/d%02d/e%02d", $root, $i % $da, int($i / $da) % $db);
            unless (-d $d) { system("mkdir", "-p", $d) == 0 or die "mkdir $d" }
            my $f = sprintf("%s/f%06d.dat", $d, $i);
            my $len = int(rand(8193));
            my $buf = "";
            if ($len) { read($rnd, $buf, $len) == $len or die "short urandom read" }
            open(my $fh, ">:raw", $f) or die "$f: $!";
            print $fh $buf;
            close($fh) or die "$f: $!";
            next unless $links;
            symlink(sprintf("f%06d.dat", $i), "$d/l$i") or die "symlink: $!" if $i % 50 == 0;
            link($f, "$d/h$i") or die "link: $!" if $i % 100 == 1;
        }
    ' "$@"
}

populate_mixed() {
    local v=$1 left=$BIG_MB i=0 pct mb
    log "mixed: ${BIG_MB} MiB of random data in five large files"
    mkdir "$v/big"
    for pct in 36 27 18 11; do
        mb=$((BIG_MB * pct / 100))
        head -c "$((mb << 20))" /dev/urandom >"$v/big/file$i.bin"
        left=$((left - mb))
        i=$((i + 1))
    done
    head -c "$((left << 20))" /dev/urandom >"$v/big/file$i.bin"
    log "mixed: $MIXED_SMALL small files"
    small_files "$v/small" "$MIXED_SMALL" 20 10 1
}

populate_small() {
    log "small: $SMALL_FILES small files in 1000 directories"
    small_files "$1/tree" "$SMALL_FILES" 40 25 0
}

SUMMARIES=()

bench_tree() { # bench_tree NAME GOAL
    local name=$1 goal=$2 img="$TMP/$1.img" loop
    log "$name: making the image"
    truncate -s 3G "$img"
    mkfs.btrfs -q -f "$img" >/dev/null
    loop=$(losetup --find --show "$img")
    mount -o noatime "$loop" "$MNT"
    "populate_$name" "$MNT"
    sync
    btrfs subvolume snapshot -r "$MNT" "$MNT/snap" >/dev/null
    sync
    umount "$MNT"
    losetup -d "$loop"

    log "$name: attaching read-only and mounting -o ro for btrfs send"
    loop=$(losetup -r --find --show "$img")
    mount -o ro "$loop" "$MNT"

    log "$name: both streams once (must be identical), warming caches"
    cat "$img" >/dev/null
    btrfs send -q -f "$TMP/kernel.stream" "$MNT/snap"
    "$RSEND" -q -d "$img" -f "$TMP/rsend.stream" snap
    local kbytes rbytes same
    kbytes=$(stat -c %s "$TMP/kernel.stream")
    rbytes=$(stat -c %s "$TMP/rsend.stream")
    if cmp -s "$TMP/kernel.stream" "$TMP/rsend.stream"; then
        same="byte-identical"
    else
        same="DIFFERENT"
        echo "send.sh: WARNING: $name: rsend's stream differs from the kernel's" >&2
    fi
    echo "$name: stream $kbytes bytes (kernel), $rbytes bytes (rsend), $same"
    rm -f "$TMP/kernel.stream" "$TMP/rsend.stream"

    log "$name: hyperfine"
    hyperfine --warmup 1 --runs "$RUNS" --style basic --export-json "$TMP/$name.json" \
        --export-markdown "$TMP/$name.md" \
        -n "btrfs send (kernel, ro mount)" "btrfs send -q '$MNT/snap' >/dev/null" \
        -n "rsend (image file)" "'$RSEND' -q -d '$img' snap >/dev/null"

    log "$name: peak RSS (/usr/bin/time -v)"
    /usr/bin/time -v -o "$TMP/rss-kernel" btrfs send -q "$MNT/snap" >/dev/null
    /usr/bin/time -v -o "$TMP/rss-rsend" "$RSEND" -q -d "$img" snap >/dev/null
    local rk rr k r ratio
    rk=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$TMP/rss-kernel")
    rr=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$TMP/rss-rsend")
    k=$(jq -r '.results[0] | "\(.mean * 1000 | round) ± \(.stddev * 1000 | round) ms"' "$TMP/$name.json")
    r=$(jq -r '.results[1] | "\(.mean * 1000 | round) ± \(.stddev * 1000 | round) ms"' "$TMP/$name.json")
    ratio=$(jq -r '(.results[1].mean / .results[0].mean * 100 | round) / 100' "$TMP/$name.json")
    SUMMARIES+=("SUMMARY $name: kernel $k, rsend $r, ratio $ratio (goal <= $goal); peak RSS kernel-side btrfs-progs ${rk} KiB, rsend ${rr} KiB; streams $same ($kbytes bytes)")
    if [[ -n $RESULTS_DIR ]]; then
        mkdir -p "$RESULTS_DIR"
        cp "$TMP/$name.json" "$TMP/$name.md" "$RESULTS_DIR/"
        cp "$TMP/rss-kernel" "$RESULTS_DIR/$name-rss-kernel.txt"
        cp "$TMP/rss-rsend" "$RESULTS_DIR/$name-rss-rsend.txt"
    fi
    umount "$MNT"
    losetup -d "$loop"
    rm -f "$img"
}

[[ -z $ONLY || $ONLY == mixed ]] && bench_tree mixed 0.5
[[ -z $ONLY || $ONLY == small ]] && bench_tree small 0.25

echo
echo "machine: nproc $(nproc); $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo); kernel $(uname -r); $(btrfs --version | head -1)"
for s in "${SUMMARIES[@]}"; do
    echo "$s"
done
if [[ -n $RESULTS_DIR ]]; then
    printf '%s\n' "${SUMMARIES[@]}" >"$RESULTS_DIR/summary.txt"
fi
