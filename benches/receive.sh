#!/bin/bash
# Benchmark `rreceive` against `btrfs receive` on a kernel-made send stream
# of 100,000 small files: both onto a fresh btrfs, and rreceive also onto a
# fresh ext4 and a fresh tmpfs, in one run.
#
# Usage: sudo benches/receive.sh
#
# Environment (all optional):
#   RUNS=3            hyperfine runs per command (at least 2)
#   FILES=100000      number of small files (0-4 KiB of random data each,
#                     in 200 directories d00..d19/e00..e09)
#   SEND_PROTO=       `btrfs send --proto N` (default: btrfs-progs' default, v1)
#   RESULTS_DIR=      copy the hyperfine exports and the summary here
#   KEEP_STREAM=      copy the send stream to this path
#   TMPDIR=/tmp       where the scratch directory is made (needs ~4 GB free)
#
# Needs: root, loop devices, btrfs-progs, e2fsprogs, hyperfine, perl, jq,
# python3, cargo. Each timed run gets a new filesystem (made in hyperfine's
# --prepare step, not timed), and the stream is read from the page cache.
# Before timing, the trees made by both tools are compared with
# testdata/manifest.py. Everything happens in a mktemp -d directory that is
# unmounted, detached and removed on exit, also on failure.
set -euo pipefail

if [[ $EUID -ne 0 ]]; then
    echo "receive.sh: must run as root (sudo benches/receive.sh)" >&2
    exit 1
fi

export LC_ALL=C
export TZ=UTC
umask 022

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RRECEIVE="$REPO/target/release/rreceive"
RUNS=${RUNS:-3}
FILES=${FILES:-100000}
SEND_PROTO=${SEND_PROTO:-}
RESULTS_DIR=${RESULTS_DIR:-}
KEEP_STREAM=${KEEP_STREAM:-}
IMG_SIZE=4G

log() { echo "== $*" >&2; }
die() { echo "receive.sh: ERROR: $*" >&2; exit 1; }

(( RUNS >= 2 )) || die "RUNS must be at least 2"
command -v jq >/dev/null || apt-get install -y -q jq >/dev/null || die "cannot install jq"
for t in btrfs mkfs.btrfs mkfs.ext4 losetup hyperfine perl python3 cmp; do
    command -v "$t" >/dev/null || die "$t not found"
done

# ---------------------------------------------------------------------------
# 1. build

log "building rreceive (release)"
if [[ -n ${SUDO_USER:-} && $SUDO_USER != root ]]; then
    sudo -u "$SUDO_USER" -H bash -lc "cd '$REPO' && cargo build --release -p rreceive" >&2
else
    (cd "$REPO" && cargo build --release -p rreceive) >&2
fi
[[ -x $RRECEIVE ]] || die "$RRECEIVE was not built"

# ---------------------------------------------------------------------------
# scratch directory, cleaned up on any exit

TMP=$(mktemp -d "${TMPDIR:-/tmp}/rreceive-bench.XXXXXX")
MNT="$TMP/mnt"
DST="$TMP/dst"
mkdir "$MNT" "$DST"

cleanup() {
    local rc=$? m dev
    set +e
    cd /
    for m in "$DST" "$MNT"; do
        if mountpoint -q "$m" 2>/dev/null; then
            umount "$m" || { sleep 1; umount "$m"; } || umount -l "$m"
        fi
    done
    for img in "$TMP"/*.img; do
        [[ -e $img ]] || continue
        for dev in $(losetup -n -O NAME -j "$img" 2>/dev/null); do
            losetup -d "$dev"
        done
    done
    if grep -qF " $TMP/" /proc/self/mounts; then
        echo "receive.sh: WARNING: something is still mounted under $TMP, not removing it" >&2
    else
        rm -rf "$TMP"
    fi
    [[ $rc -ne 0 ]] && echo "receive.sh: FAILED (exit $rc)" >&2
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------------------
# 2. source tree, snapshot, stream

log "creating the source btrfs in $TMP"
truncate -s "$IMG_SIZE" "$TMP/src.img"
mkfs.btrfs -q -f "$TMP/src.img" >/dev/null
mount -o loop "$TMP/src.img" "$MNT"
btrfs -q subvolume create "$MNT/vol"

log "writing $FILES small files"
perl -e '
    use strict; use warnings;
    my ($root, $n) = @ARGV;
    srand(20240601);
    open(my $rnd, "<:raw", "/dev/urandom") or die "urandom: $!";
    for my $i (0 .. $n - 1) {
        my $d = sprintf("%s/d%02d/e%02d", $root, $i % 20, int($i / 20) % 10);
        unless (-d $d) { system("mkdir", "-p", $d) == 0 or die "mkdir $d" }
        my $f = sprintf("%s/f%06d", $d, $i);
        my $len = int(rand(4097));
        my $buf = "";
        if ($len) { read($rnd, $buf, $len) == $len or die "short urandom read" }
        open(my $fh, ">:raw", $f) or die "$f: $!";
        print $fh $buf;
        close($fh) or die "$f: $!";
    }
' "$MNT/vol" "$FILES"
sync
btrfs -q subvolume snapshot -r "$MNT/vol" "$MNT/snap"
sync

STREAM="$TMP/snap.stream"
log "btrfs send${SEND_PROTO:+ --proto $SEND_PROTO}"
btrfs send -q ${SEND_PROTO:+--proto "$SEND_PROTO"} -f "$STREAM" "$MNT/snap"
umount "$MNT"
rm -f "$TMP/src.img"
STREAM_BYTES=$(stat -c %s "$STREAM")
COMMANDS=$("$REPO/target/release/rdump" --summary "$STREAM" 2>/dev/null | awk '$1 == "total" { print $2 }' || true)
echo "stream: $STREAM_BYTES bytes ($((STREAM_BYTES >> 20)) MiB), ${COMMANDS:-?} commands, $FILES files"

# ---------------------------------------------------------------------------
# 3. fresh destination filesystems (hyperfine --prepare; not timed)

RESET="$TMP/reset.sh"
cat >"$RESET" <<EOF
#!/bin/bash
set -euo pipefail
if mountpoint -q '$DST'; then umount '$DST'; fi
case \$1 in
btrfs) truncate -s $IMG_SIZE '$TMP/dst.img'; mkfs.btrfs -q -f '$TMP/dst.img' >/dev/null
       mount -o loop '$TMP/dst.img' '$DST' ;;
ext4)  truncate -s $IMG_SIZE '$TMP/dst.img'; mkfs.ext4 -q -F '$TMP/dst.img'
       mount -o loop '$TMP/dst.img' '$DST' ;;
tmpfs) rm -f '$TMP/dst.img'; mount -t tmpfs -o size=3g tmpfs '$DST' ;;
esac
sync
cat '$STREAM' >/dev/null
EOF
chmod +x "$RESET"

log "checking that both tools make the same tree"
"$RESET" btrfs
btrfs receive -q -f "$STREAM" "$DST"
python3 "$REPO/testdata/manifest.py" "$DST/snap" >"$TMP/progs.manifest"
"$RESET" btrfs
"$RRECEIVE" -q -f "$STREAM" "$DST"
python3 "$REPO/testdata/manifest.py" "$DST/snap" >"$TMP/rreceive.manifest"
btrfs subvolume show "$DST/snap" | grep -q 'Flags:.*readonly' || die "rreceive's subvolume is not read-only"
# The root's mtime is left out: the kernel sends the root's times before
# it creates and renames orphans in the root, so after btrfs receive the
# root has the time of the receive (rreceive, which creates files at their
# final names, keeps the sender's).
for m in progs rreceive; do
    awk -F'\t' -v OFS='\t' '$1 == "2e" { $8 = "-" } { print }' "$TMP/$m.manifest" >"$TMP/$m.cmp"
done
cmp "$TMP/progs.cmp" "$TMP/rreceive.cmp" || {
    diff "$TMP/progs.cmp" "$TMP/rreceive.cmp" | head -20 >&2
    die "TREE MISMATCH between btrfs receive and rreceive"
}
echo "trees: identical ($(wc -l <"$TMP/progs.manifest") manifest lines)"
umount "$DST"

# ---------------------------------------------------------------------------
# 4. timings

log "hyperfine ($RUNS runs each)"
hyperfine --runs "$RUNS" --style basic \
    --export-markdown "$TMP/receive.md" --export-json "$TMP/receive.json" \
    --prepare "'$RESET' btrfs" -n "btrfs receive (btrfs)" "btrfs receive -q -f '$STREAM' '$DST'" \
    --prepare "'$RESET' btrfs" -n "rreceive (btrfs)" "'$RRECEIVE' -q -f '$STREAM' '$DST'" \
    --prepare "'$RESET' ext4" -n "rreceive (ext4)" "'$RRECEIVE' -q -f '$STREAM' '$DST'" \
    --prepare "'$RESET' tmpfs" -n "rreceive (tmpfs)" "'$RRECEIVE' -q -f '$STREAM' '$DST'"

# ---------------------------------------------------------------------------
# 5. summary

ms() { jq -r ".results[$1] | \"\\(.mean * 1000 | round) ± \\(.stddev * 1000 | round) ms\"" "$TMP/receive.json"; }
RATIO=$(jq -r '(.results[1].mean / .results[0].mean * 1000 | round) / 1000' "$TMP/receive.json")
VERDICT=$(awk -v r="$RATIO" 'BEGIN { print (r <= 0.5) ? "meets goal <= 0.5" : "ABOVE goal 0.5" }')
{
    echo
    echo "## machine"
    echo "nproc $(nproc); $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
    echo "kernel $(uname -r); $(btrfs --version | head -1); $("$RRECEIVE" --version)"
    echo "busiest other processes during the run:"
    ps -eo pcpu,comm --sort=-pcpu | sed -n 2,4p
    echo
    echo "## stream"
    echo "$STREAM_BYTES bytes, ${COMMANDS:-?} commands, $FILES files"
    echo
    echo "## times"
    cat "$TMP/receive.md"
    echo
    echo "SUMMARY: rreceive/btrfs-receive time ratio on btrfs: $RATIO ($(ms 1) vs $(ms 0), $VERDICT); rreceive onto ext4 $(ms 2), onto tmpfs $(ms 3)"
} | tee "$TMP/summary.txt"

if [[ -n $RESULTS_DIR ]]; then
    mkdir -p "$RESULTS_DIR"
    cp "$TMP"/receive.{md,json} "$TMP/summary.txt" "$RESULTS_DIR"/
    log "results copied to $RESULTS_DIR"
fi
if [[ -n $KEEP_STREAM ]]; then
    cp "$STREAM" "$KEEP_STREAM"
    log "stream copied to $KEEP_STREAM"
fi
