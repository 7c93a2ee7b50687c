#!/bin/bash
# Benchmark protocol v2 compressed sends: `rsend -d IMAGE` (the image file,
# no kernel) against the kernel's `btrfs send` on the same image mounted
# read-only, full (s0) and incremental (-p s0 s1), each as protocol v1
# (compressed extents decompressed into WRITEs) and as `--proto 2
# --compressed-data` (compressed extents as they are, ENCODED_WRITE). Warm
# cache, all to /dev/null.
#
# Usage: sudo benches/compressed.sh
#
# Goals (issue 11): rsend's v2 compressed send at most 0.5 x the kernel's
# time; the stream bytes of v2 compressed against v1 reported.
#
# Environment (all optional):
#   MB=600        data written to s0 (MB; the goal asks for 500 or more)
#   RUNS=9        timed pairs per row (kernel, rsend, kernel, rsend, ...)
#   WARMUP=1      untimed pairs first
#   IMG_DIR=/var/tmp/rsend-bench-compressed  where the built image is kept
#   REBUILD=      1: build the image again even when cached
#   RESULTS_DIR=  copy the per-row JSON and the table here
#   TMPDIR=/tmp   scratch space (mount point, streams of one row)
#
# The tree (mounted compress-force=zstd:3 while it is written): MB of
# text-like data (words drawn from a vocabulary; the tree compresses about 2:1 under zstd) in
# files of 1 to 16 MB across 20 directories, a tenth of it incompressible;
# read-only snapshot s0; then the change: 2% of the files rewritten in
# part, 1% deleted, 30 MB of new files; read-only snapshot s1. The image is
# cached under IMG_DIR, keyed by MB and a hash of this script.
set -euo pipefail
BENCH=compressed.sh
# shellcheck source=benches/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

MB=${MB:-600}
RUNS=${RUNS:-9}
WARMUP=${WARMUP:-1}
IMG_DIR=${IMG_DIR:-/var/tmp/rsend-bench-compressed}
RESULTS_DIR=${RESULTS_DIR:-}
(( RUNS >= 3 )) || die "RUNS must be at least 3"
for t in btrfs mkfs.btrfs losetup python3 cmp; do
    command -v "$t" >/dev/null || die "$t not found"
done
build_rsend

scratch_dir rsend-compressed-bench
MNT="$TMP/mnt"
mkdir "$MNT"
scratch_mount "$MNT"

# make_tree MNT: the tree, s0, the change, s1 (see the header).
make_tree() {
    mount -o remount,compress-force=zstd:3 "$1"
    btrfs -q subvolume create "$1/vol"
    python3 - "$1/vol" "$MB" make <<'PY'
import os, random, sys
root, mb, what = sys.argv[1], int(sys.argv[2]), sys.argv[3]
r = random.Random(11)
words = [bytes(r.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(r.randint(2, 11)))
         for _ in range(5000)]
text = b" ".join(r.choice(words) for _ in range(800_000))  # ~5 MB to draw from
noise = r.randbytes(4 << 20)
def content(seed, size, incompressible):
    src = noise if incompressible else text
    out, pos = bytearray(), (seed * 7919) % (len(src) - 1)
    while len(out) < size:
        out += b"#%d@%d\n" % (seed, len(out))
        take = min(len(src) - pos, size - len(out), 1 << 20)
        out += src[pos:pos + take]
        pos = (pos + take) % (len(src) - 1)
    return bytes(out[:size])
total, i = 0, 0
while total < mb << 20:
    size = r.randint(1, 16) << 20
    d = os.path.join(root, "d%02d" % (i % 20))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%04d" % i), "wb") as f:
        f.write(content(i, size, i % 10 == 9))
    total += size
    i += 1
print(f"{i} files, {total >> 20} MB", file=sys.stderr)
PY
    sync
    btrfs -q subvolume snapshot -r "$1/vol" "$1/s0"
    python3 - "$1/vol" <<'PY'
import os, random, sys
root = sys.argv[1]
r = random.Random(12)
files = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)
for p in r.sample(files, max(1, len(files) // 50)):
    size = os.path.getsize(p)
    with open(p, "r+b") as f:
        f.seek(r.randrange(0, max(1, size - (1 << 20))))
        f.write(b"changed %d " % r.randrange(1 << 30) * 40000)
for p in r.sample(files, max(1, len(files) // 100)):
    os.remove(p)
os.makedirs(os.path.join(root, "new"), exist_ok=True)
words = b"lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod ".split()
for k in range(3):
    with open(os.path.join(root, "new", "n%d" % k), "wb") as f:
        f.write(b" ".join(r.choice(words) for _ in range(1_700_000))[:10 << 20])
PY
    sync
    btrfs -q subvolume snapshot -r "$1/vol" "$1/s1"
    mount -o remount,compress=no "$1"
}

key=$(sha256sum "$0" | cut -c1-12)
IMG="$IMG_DIR/zstd-$MB-$key.img"
mkdir -p "$IMG_DIR"
build_cached_image "$IMG" "$((MB * 3 + 1024))M" "$MNT" make_tree

log "attaching read-only, mounting -o ro for btrfs send"
LOOPDEV=$(losetup -r --find --show "$IMG")
scratch_image "$IMG"
mount -o ro "$LOOPDEV" "$MNT"
log "warming the page cache"
warm_cache "$IMG"

ROWS=()
declare -A BYTES=()
# bench_row NAME FLAGS SNAPS: both streams once (sizes, cmp), then the pairs.
bench_row() {
    local name=$1 flags=$2 snaps=$3 ksnaps kb rb same j
    ksnaps=$(sed -E "s|(^\| )(s[01])|\1$MNT/\2|g" <<<"$snaps")
    # shellcheck disable=SC2086
    btrfs send -q $flags -f "$TMP/kernel.stream" $ksnaps
    # shellcheck disable=SC2086
    "$RSEND" -q -d "$IMG" $flags -f "$TMP/rsend.stream" $snaps
    kb=$(stat -c %s "$TMP/kernel.stream")
    rb=$(stat -c %s "$TMP/rsend.stream")
    if cmp -s "$TMP/kernel.stream" "$TMP/rsend.stream"; then same=identical; else same=different; fi
    BYTES[$name]=$rb
    rm -f "$TMP"/*.stream
    log "$name: kernel $kb bytes, rsend $rb bytes ($same); $WARMUP + $RUNS pairs"
    j="$TMP/$name.json"
    time_pairs "$RUNS" "$WARMUP" "$j" \
        kernel "btrfs send -q $flags -f /dev/null $ksnaps" \
        rsend "'$RSEND' -q -d '$IMG' $flags -f /dev/null $snaps"
    [[ -z $RESULTS_DIR ]] || { mkdir -p "$RESULTS_DIR"; cp "$j" "$RESULTS_DIR/"; }
    ROWS+=("$(python3 - "$j" "$name" "$kb" "$rb" "$same" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
name, kb, rb, same = sys.argv[2:]
ms = lambda d: f"{d['median'] * 1000:.0f} ({d['min'] * 1000:.0f}-{d['max'] * 1000:.0f})"
r = s["ratio"]
print(f"| {name} | {ms(s['kernel'])} | {ms(s['rsend'])} | **{r['median']:.2f}** ({r['min']:.2f}-{r['max']:.2f}) "
      f"| {s['rsend_maxrss_kib'] / 1024:.0f} MiB | {int(kb):,} | {int(rb):,} ({same}) |")
PY
)")
}

bench_row "full v1" "" "s0"
bench_row "full v2 compressed" "--proto 2 --compressed-data" "s0"
bench_row "incremental v1" "" "-p s0 s1"
bench_row "incremental v2 compressed" "--proto 2 --compressed-data" "-p s0 s1"

{
    echo
    echo "machine: $(machine_line); $("$RSEND" --version)"
    echo
    echo "Tree: $MB MB written with compress-force=zstd:3 (about 2:1 on disk, a tenth incompressible); change: 2% of the files rewritten in part, 1% deleted, 30 MB new. $RUNS alternating pairs after $WARMUP warm-up pair; times in ms, median (min-max); ratio = rsend/kernel per pair."
    echo
    echo "| send | kernel \`btrfs send\` ms | rsend ms | ratio | rsend peak RSS | kernel stream bytes | rsend stream bytes |"
    echo "|---|---:|---:|---:|---:|---:|---:|"
    printf '%s\n' "${ROWS[@]}"
    echo
    python3 - "${BYTES[full v1]}" "${BYTES[full v2 compressed]}" "${BYTES[incremental v1]}" "${BYTES[incremental v2 compressed]}" <<'PY'
import sys
f1, f2, i1, i2 = map(int, sys.argv[1:])
print(f"Stream bytes, v2 compressed over v1 (rsend): full {f2 / f1:.3f}, incremental {i2 / i1:.3f}.")
PY
    echo
    echo "Goal: rsend --proto 2 --compressed-data at most 0.5 x the kernel's time."
} | tee "$TMP/summary.md"
[[ -z $RESULTS_DIR ]] || cp "$TMP/summary.md" "$RESULTS_DIR/"
