#!/bin/bash
# Benchmark `rdump STREAM` against `btrfs receive --dump -f STREAM` on a
# kernel-made send stream of 500 MB or more.
#
# Usage: sudo benches/dump.sh
#
# Environment (all optional):
#   RUNS=10           hyperfine runs per command (at least 5)
#   BIG_MB=550        total size of the large random files, MiB
#   SMALL_FILES=20000 number of small files (0-8 KiB each, nested dirs)
#   SEND_PROTO=       `btrfs send --proto N` (default: btrfs-progs' default, v1)
#   RESULTS_DIR=      copy the hyperfine exports, RSS and summary here
#   KEEP_STREAM=      copy the send stream to this path (e.g. for profiling)
#   TMPDIR=/tmp       where the scratch directory is made (needs ~2.5 GB free)
#   REREAD=1          drop the page cache and read the stream back before
#                     timing (a stored stream); 0 keeps the just-written state
#
# Needs: root, btrfs loop mounts, btrfs-progs, hyperfine, cargo, perl, jq and
# /usr/bin/time (the last two are installed with apt-get when missing).
# Everything happens in a mktemp -d directory that is unmounted, detached and
# removed on exit, also on failure.
set -euo pipefail

if [[ $EUID -ne 0 ]]; then
    echo "dump.sh: must run as root (sudo benches/dump.sh)" >&2
    exit 1
fi

export LC_ALL=C
export TZ=UTC
umask 022

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RDUMP="$REPO/target/release/rdump"
RUNS=${RUNS:-10}
BIG_MB=${BIG_MB:-550}
SMALL_FILES=${SMALL_FILES:-20000}
SEND_PROTO=${SEND_PROTO:-}
RESULTS_DIR=${RESULTS_DIR:-}
KEEP_STREAM=${KEEP_STREAM:-}
IMG_SIZE=1536M
MIN_STREAM=$((500 * 1000 * 1000))

log() { echo "== $*" >&2; }
die() { echo "dump.sh: ERROR: $*" >&2; exit 1; }

(( RUNS >= 5 )) || die "RUNS must be at least 5"

# ---------------------------------------------------------------------------
# tools

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
for t in btrfs mkfs.btrfs losetup hyperfine perl cmp; do
    command -v "$t" >/dev/null || die "$t not found"
done

# ---------------------------------------------------------------------------
# 1. build

log "building rdump (release)"
if [[ -n ${SUDO_USER:-} && $SUDO_USER != root ]]; then
    # Build as the invoking user so target/ does not become root-owned.
    sudo -u "$SUDO_USER" -H bash -lc "cd '$REPO' && cargo build --release -p rsend-dump" >&2
else
    (cd "$REPO" && cargo build --release -p rsend-dump) >&2
fi
[[ -x $RDUMP ]] || die "$RDUMP was not built"

# ---------------------------------------------------------------------------
# scratch directory, cleaned up on any exit

TMP=$(mktemp -d "${TMPDIR:-/tmp}/rdump-bench.XXXXXX")
IMG="$TMP/fs.img"
MNT="$TMP/mnt"
LOOP=

cleanup() {
    local rc=$? dev
    set +e
    cd /
    if mountpoint -q "$MNT" 2>/dev/null; then
        umount "$MNT" || { sleep 1; umount "$MNT"; } || umount -l "$MNT"
    fi
    [[ -n $LOOP ]] && losetup -d "$LOOP" 2>/dev/null
    for dev in $(losetup -n -O NAME -j "$IMG" 2>/dev/null); do
        losetup -d "$dev"
    done
    if grep -qF " $TMP/" /proc/self/mounts; then
        echo "dump.sh: WARNING: something is still mounted under $TMP, not removing it" >&2
    else
        rm -rf "$TMP"
    fi
    [[ $rc -ne 0 ]] && echo "dump.sh: FAILED (exit $rc)" >&2
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------------------
# 2. file system, tree, snapshot, stream

log "creating $IMG_SIZE btrfs image in $TMP"
truncate -s "$IMG_SIZE" "$IMG"
mkfs.btrfs -q -f "$IMG" >/dev/null
LOOP=$(losetup --find --show "$IMG")
mkdir "$MNT"
mount "$LOOP" "$MNT"
btrfs subvolume create "$MNT/vol" >/dev/null
V="$MNT/vol"

# Large files of random data totalling BIG_MB MiB, in five uneven pieces.
log "writing ${BIG_MB} MiB of random data in large files"
mkdir "$V/big"
left=$BIG_MB
i=0
for pct in 36 27 18 11; do
    mb=$((BIG_MB * pct / 100))
    head -c "$((mb << 20))" /dev/urandom >"$V/big/file$i.bin"
    left=$((left - mb))
    i=$((i + 1))
done
head -c "$((left << 20))" /dev/urandom >"$V/big/file$i.bin"

# Many small files (0-8 KiB, random contents) in nested directories
# (d00..d19/e00..e09), plus a symlink for every 50th and a hard link for
# every 100th so the stream holds a mix of path-only commands.
log "writing $SMALL_FILES small files"
perl -e '
    use strict; use warnings;
    my ($root, $n) = @ARGV;
    srand(20240601);
    open(my $rnd, "<:raw", "/dev/urandom") or die "urandom: $!";
    for my $i (0 .. $n - 1) {
        my $d = sprintf("%s/small/d%02d/e%02d", $root, $i % 20, int($i / 20) % 10);
        unless (-d $d) { system("mkdir", "-p", $d) == 0 or die "mkdir $d" }
        my $f = sprintf("%s/f%05d.dat", $d, $i);
        my $len = int(rand(8193));
        my $buf = "";
        if ($len) { read($rnd, $buf, $len) == $len or die "short urandom read" }
        open(my $fh, ">:raw", $f) or die "$f: $!";
        print $fh $buf;
        close($fh) or die "$f: $!";
        symlink("f" . sprintf("%05d", $i) . ".dat", "$d/l$i") or die "symlink: $!" if $i % 50 == 0;
        link($f, "$d/h$i") or die "link: $!" if $i % 100 == 1;
    }
' "$V" "$SMALL_FILES"

sync
btrfs subvolume snapshot -r "$V" "$MNT/snap" >/dev/null
sync

STREAM="$TMP/snap.stream"
log "btrfs send${SEND_PROTO:+ --proto $SEND_PROTO}"
btrfs send -q ${SEND_PROTO:+--proto "$SEND_PROTO"} -f "$STREAM" "$MNT/snap"

# The stream is all the benchmark needs; drop the file system now.
umount "$MNT"
losetup -d "$LOOP"
LOOP=
rm -f "$IMG"

STREAM_BYTES=$(stat -c %s "$STREAM")
(( STREAM_BYTES >= MIN_STREAM )) ||
    die "stream is only $STREAM_BYTES bytes (< $MIN_STREAM); raise BIG_MB"
SUMMARY=$("$RDUMP" --summary "$STREAM")
COMMANDS=$(awk '$1 == "total" { print $2 }' <<<"$SUMMARY")
WRITES=$(awk '$1 == "write" { print $2 }' <<<"$SUMMARY")
PROTO=$(awk '$1 == "protocol" && $2 == "version" { print $3 }' <<<"$SUMMARY")
echo "stream: $STREAM_BYTES bytes ($((STREAM_BYTES >> 20)) MiB), protocol v$PROTO, $COMMANDS commands ($WRITES write)"

# ---------------------------------------------------------------------------
# 3. correctness, cache warm-up, timings, peak RSS

# A stream file as it is usually dumped: stored earlier, read back from disk.
# (Right after `btrfs send > FILE` the page cache holds it in small folios,
# which makes mapping it slower; set REREAD=0 to measure that state.)
if [[ ${REREAD:-1} == 1 ]]; then
    log "dropping the page cache, then reading the stream back"
    sync
    echo 3 >/proc/sys/vm/drop_caches
fi
log "warming the page cache"
cat "$STREAM" >/dev/null

log "checking that both tools print identical output (TZ=UTC)"
btrfs receive --dump -f "$STREAM" >"$TMP/progs.out"
"$RDUMP" "$STREAM" >"$TMP/rdump.out"
cat "$STREAM" | btrfs receive --dump >"$TMP/progs-pipe.out"
cat "$STREAM" | "$RDUMP" >"$TMP/rdump-pipe.out"
for pair in "progs.out rdump.out" "progs.out progs-pipe.out" "progs.out rdump-pipe.out"; do
    # shellcheck disable=SC2086
    set -- $pair
    if ! cmp "$TMP/$1" "$TMP/$2"; then
        diff "$TMP/$1" "$TMP/$2" | head -20 >&2 || true
        die "OUTPUT MISMATCH between $1 and $2"
    fi
done
OUT_LINES=$(wc -l <"$TMP/progs.out")
OUT_BYTES=$(stat -c %s "$TMP/progs.out")
echo "output: identical, $OUT_LINES lines, $OUT_BYTES bytes"
rm -f "$TMP"/*.out

log "hyperfine: file argument"
hyperfine --warmup 1 --runs "$RUNS" --style basic \
    --export-markdown "$TMP/file.md" --export-json "$TMP/file.json" \
    -n "btrfs receive --dump -f" "btrfs receive --dump -f '$STREAM' >/dev/null" \
    -n "rdump FILE" "'$RDUMP' '$STREAM' >/dev/null"

log "hyperfine: from a pipe"
hyperfine --warmup 1 --runs "$RUNS" --style basic \
    --export-markdown "$TMP/pipe.md" --export-json "$TMP/pipe.json" \
    -n "cat | btrfs receive --dump" "cat '$STREAM' | btrfs receive --dump >/dev/null" \
    -n "cat | rdump" "cat '$STREAM' | '$RDUMP' >/dev/null"

log "peak RSS (/usr/bin/time -v)"
maxrss() { awk -F': ' '/Maximum resident set size/ { print $2 }' "$1"; }
/usr/bin/time -v -o "$TMP/rss-progs-file" btrfs receive --dump -f "$STREAM" >/dev/null
/usr/bin/time -v -o "$TMP/rss-rdump-file" "$RDUMP" "$STREAM" >/dev/null
cat "$STREAM" | /usr/bin/time -v -o "$TMP/rss-progs-pipe" btrfs receive --dump >/dev/null
cat "$STREAM" | /usr/bin/time -v -o "$TMP/rss-rdump-pipe" "$RDUMP" >/dev/null
{
    echo "| mode | btrfs receive --dump | rdump |"
    echo "|:---|---:|---:|"
    echo "| file | $(maxrss "$TMP/rss-progs-file") KiB | $(maxrss "$TMP/rss-rdump-file") KiB |"
    echo "| pipe | $(maxrss "$TMP/rss-progs-pipe") KiB | $(maxrss "$TMP/rss-rdump-pipe") KiB |"
} >"$TMP/rss.md"

# ---------------------------------------------------------------------------
# 4. summary

# mean ± stddev in ms of result $2 of hyperfine export $1
ms() { jq -r ".results[$2] | \"\\(.mean * 1000 | round) ± \\(.stddev * 1000 | round) ms\"" "$1"; }
ratio() { jq -r '(.results[1].mean / .results[0].mean * 1000 | round) / 1000' "$1"; }
RATIO_FILE=$(ratio "$TMP/file.json")
RATIO_PIPE=$(ratio "$TMP/pipe.json")
verdict() { awk -v r="$1" 'BEGIN { print (r <= 0.33) ? "meets goal <= 0.33" : "ABOVE goal 0.33" }'; }

{
    echo
    echo "## machine"
    echo "nproc $(nproc); $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
    echo "kernel $(uname -r); $(btrfs --version | head -1); $("$RDUMP" --version)"
    echo
    echo "## stream"
    echo "$STREAM_BYTES bytes, protocol v$PROTO, $COMMANDS commands ($WRITES write); dump output $OUT_LINES lines, $OUT_BYTES bytes"
    echo
    echo "## file argument"
    cat "$TMP/file.md"
    echo
    echo "## from a pipe"
    cat "$TMP/pipe.md"
    echo
    echo "## peak RSS"
    cat "$TMP/rss.md"
    echo
    echo "SUMMARY: rdump/progs time ratio: file $RATIO_FILE ($(ms "$TMP/file.json" 1) vs $(ms "$TMP/file.json" 0), $(verdict "$RATIO_FILE")); pipe $RATIO_PIPE ($(ms "$TMP/pipe.json" 1) vs $(ms "$TMP/pipe.json" 0), $(verdict "$RATIO_PIPE"))"
} | tee "$TMP/summary.txt"

if [[ -n $RESULTS_DIR ]]; then
    mkdir -p "$RESULTS_DIR"
    cp "$TMP"/{file,pipe}.{md,json} "$TMP/rss.md" "$TMP/summary.txt" "$RESULTS_DIR"/
    log "results copied to $RESULTS_DIR"
fi
if [[ -n $KEEP_STREAM ]]; then
    cp "$STREAM" "$KEEP_STREAM"
    log "stream copied to $KEEP_STREAM"
fi
