#!/bin/bash
# Benchmark incremental sends: `rsend -d IMAGE -p s0 s1` (read from the image
# file, no kernel) against the kernel's `btrfs send -p s0 s1` on the same
# image mounted read-only, for trees of 10k, 100k and 1M small files with the
# same small change between s0 and s1. Warm cache, both to /dev/null.
#
# Usage: sudo benches/incremental.sh
#
# Goals (issue 9): on 100k files at most 1.0 x the kernel's time; the time
# grows with the change, not with the tree (10k / 100k / 1M); rsend's peak
# RSS at most 128 MiB on the 1M tree.
#
# Environment (all optional):
#   SIZES="10000 100000 1000000"  trees to run (files per tree)
#   RUNS=31        timed pairs per tree (kernel, rsend, kernel, rsend, ...)
#   WARMUP=2       untimed pairs first
#   IMG_DIR=/var/tmp/rsend-bench-incremental
#                  where the built images are kept between runs (sparse;
#                  the 1M tree takes ~6 GB and ~2 minutes to build)
#   REBUILD=       1: build the images again even when cached
#   PROFILE=       1: also `perf record -g` PROFILE_RUNS (40) runs of rsend on
#                  each tree and print where its CPU time goes
#                  (benches/perf_breakdown.py); perf reports land in
#                  RESULTS_DIR, with the largest tree's perf.data
#   RESULTS_DIR=   copy the per-run JSON, RSS reports and the table here
#   TMPDIR=/tmp    scratch space (streams, mount points; small)
#
# Each tree: vol/dNNNN/fNNNN, 1000 files per directory, 1-3000 bytes of
# pseudo-random data each (about two thirds inline, the rest in data
# extents), made through a loop mount of a sparse image (python: faster here
# than mkfs.btrfs --rootdir); read-only snapshot s0; then the
# change: 100 files spread over the tree rewritten, 5 deleted, 5 created,
# directories d0003 and d0005 moved into other directories; read-only
# snapshot s1. The image is cached under IMG_DIR, keyed by N and a hash of
# benches/smalltree.py, so editing the generator rebuilds it.
#
# Timing: the image is attached read-only (losetup -r) and mounted -o ro
# for the kernel; rsend reads the same image file at the same time (both
# share its page cache). Both streams are made once and compared (bytes,
# cmp). Then time_pairs (common.sh) runs the pairs alternately, wall time from
# perf_counter and peak RSS from wait4; per pair the ratio rsend/kernel.
# Reported: median (min-max) of each tool's time and of the ratio;
# /usr/bin/time -v gives rsend's peak RSS once more.
set -euo pipefail
BENCH=incremental.sh
# shellcheck source=benches/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SIZES=${SIZES:-10000 100000 1000000}
RUNS=${RUNS:-31}
WARMUP=${WARMUP:-2}
IMG_DIR=${IMG_DIR:-/var/tmp/rsend-bench-incremental}
REBUILD=${REBUILD:-}
PROFILE=${PROFILE:-}
PROFILE_RUNS=${PROFILE_RUNS:-40}
PERF_FREQ=4000
RESULTS_DIR=${RESULTS_DIR:-}
(( RUNS >= 3 )) || die "RUNS must be at least 3"

need_pkg /usr/bin/time time
[[ -z $PROFILE ]] || need_pkg perf linux-perf
for t in btrfs mkfs.btrfs losetup python3 cmp; do
    command -v "$t" >/dev/null || die "$t not found"
done
build_rsend

scratch_dir rsend-incr-bench
MNT="$TMP/mnt"
mkdir "$MNT"
scratch_mount "$MNT"

ROWS=()
DETAIL=()
LOAD=()

bench_tree() { # bench_tree N
    local n=$1 img loop kb rb same rss j
    img=$(smalltree_image_path "$n")
    log "$n files: attaching read-only, mounting -o ro for btrfs send"
    loop=$(losetup -r --find --show "$img")
    scratch_image "$img"
    mount -o ro "$loop" "$MNT"

    log "$n files: warming caches, both streams once"
    cat "$img" >/dev/null
    btrfs send -q -p "$MNT/s0" -f "$TMP/kernel.stream" "$MNT/s1"
    "$RSEND" -q -d "$img" -p s0 -f "$TMP/rsend.stream" s1
    kb=$(stat -c %s "$TMP/kernel.stream")
    rb=$(stat -c %s "$TMP/rsend.stream")
    if cmp -s "$TMP/kernel.stream" "$TMP/rsend.stream"; then same=identical; else same=different; fi
    (( rb <= kb )) || echo "$BENCH: WARNING: $n files: rsend's stream is larger than the kernel's ($rb > $kb)" >&2
    echo "$n files: stream $kb bytes (kernel), $rb bytes (rsend), $same" >&2

    log "$n files: $WARMUP + $RUNS alternating pairs"
    j="$TMP/incr-$n.json"
    time_pairs "$RUNS" "$WARMUP" "$j" \
        kernel "btrfs send -q -p '$MNT/s0' '$MNT/s1'" \
        rsend "'$RSEND' -q -d '$img' -p s0 -f /dev/null s1"
    LOAD+=("$n: $(cut -d' ' -f1-3 /proc/loadavg)")

    log "$n files: peak RSS (/usr/bin/time -v)"
    /usr/bin/time -v -o "$TMP/rss-rsend-$n" "$RSEND" -q -d "$img" -p s0 -f /dev/null s1
    /usr/bin/time -v -o "$TMP/rss-kernel-$n" btrfs send -q -p "$MNT/s0" "$MNT/s1" >/dev/null
    rss=$(maxrss "$TMP/rss-rsend-$n")
    local preads=- blocks=-
    if command -v strace >/dev/null; then
        # every pread64 rsend makes: 16 KiB tree blocks (the nodesize) and file data
        strace -f -e trace=pread64 -o "$TMP/strace-$n" "$RSEND" -q -d "$img" -p s0 -f /dev/null s1
        preads=$(grep -c 'pread64(' "$TMP/strace-$n" || true)
        blocks=$(grep -c 'pread64(.*, 16384, [0-9]*) *= 16384' "$TMP/strace-$n" || true)
        if [[ -n $RESULTS_DIR ]]; then
            mkdir -p "$RESULTS_DIR"
            cp "$TMP/strace-$n" "$RESULTS_DIR/strace-rsend-$n.txt"
        fi
    fi
    ROWS+=("$(python3 - "$j" "$n" "$rss" "$kb" "$rb" "$same" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
n, rss, kb, rb, same = sys.argv[2:]
ms = lambda d: f"{d['median'] * 1000:.1f} ({d['min'] * 1000:.1f}-{d['max'] * 1000:.1f})"
r = s["ratio"]
print(f"| {int(n):,} | {ms(s['kernel'])} | {ms(s['rsend'])} | **{r['median']:.2f}** ({r['min']:.2f}-{r['max']:.2f}) "
      f"| {int(rss) / 1024:.1f} MiB | {int(kb):,} | {int(rb):,} ({same}) |")
PY
)")
    DETAIL+=("$(python3 - "$j" "$n" "$(maxrss "$TMP/rss-kernel-$n")" "$preads" "$blocks" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
m = lambda k: f"{s[k]['median'] * 1000:.1f}"
c = s["cpu_ratio"]
print(f"| {int(sys.argv[2]):,} | {m('kernel_cpu')} ({m('kernel_sys')} sys) | {m('rsend_cpu')} ({m('rsend_user')} user) "
      f"| {c['median']:.2f} ({c['min']:.2f}-{c['max']:.2f}) "
      f"| {sys.argv[4]} | {sys.argv[5]} | {s['rsend_maxrss_kib'] / 1024:.1f} MiB | {int(sys.argv[3]) / 1024:.1f} MiB |")
PY
)")
    if [[ -n $RESULTS_DIR ]]; then
        mkdir -p "$RESULTS_DIR"
        cp "$j" "$RESULTS_DIR/"
        cp "$TMP/rss-rsend-$n" "$RESULTS_DIR/rss-rsend-$n.txt"
        cp "$TMP/rss-kernel-$n" "$RESULTS_DIR/rss-kernel-$n.txt"
    fi

    if [[ -n $PROFILE ]]; then
        profile_rsend "$n" "$img"
    fi
    rm -f "$TMP"/*.stream
    umount "$MNT"
    losetup -d "$loop"
}

PROFILES=()
label() { # 10000 -> 10k, 1000000 -> 1M
    if (( $1 % 1000000 == 0 )); then echo "$(($1 / 1000000))M"
    elif (( $1 % 1000 == 0 )); then echo "$(($1 / 1000))k"
    else echo "$1"; fi
}
profile_rsend() { # profile_rsend N IMG
    local n=$1 img=$2 out=${RESULTS_DIR:-$TMP}
    mkdir -p "$out"
    log "$n files: perf record -g (dwarf call graphs) over $PROFILE_RUNS runs of rsend"
    perf record -q -g --call-graph dwarf,32768 -F "$PERF_FREQ" -o "$TMP/perf-$n.data" -- \
        sh -c "for i in \$(seq $PROFILE_RUNS); do '$RSEND' -q -d '$img' -p s0 -f /dev/null s1; done" 2>/dev/null
    perf script -i "$TMP/perf-$n.data" -F comm,tid,ip,sym 2>/dev/null >"$TMP/perf-$n.script"
    perf report -i "$TMP/perf-$n.data" --stdio --children --sort symbol -g none --percent-limit 1 \
        2>/dev/null >"$out/perf-report-$n.txt" || true
    if [[ -n $RESULTS_DIR && $n == "${SIZES##* }" ]]; then
        mv "$TMP/perf-$n.data" "$RESULTS_DIR/"
    else
        rm -f "$TMP/perf-$n.data"
    fi
    PROFILES+=("$(label "$n") files=$TMP/perf-$n.script")
}
for n in $SIZES; do
    smalltree_image "$n" "$MNT"
done
for n in $SIZES; do
    bench_tree "$n"
done

# ---------------------------------------------------------------------------
# summary

{
    echo
    echo "machine: $(machine_line); $("$RSEND" --version)"
    echo "load average (1/5/15 min) after each tree: ${LOAD[*]}"
    echo "busiest other processes at the end:"
    ps -eo pcpu,comm --sort=-pcpu | sed -n 2,4p
    echo
    echo "Change s0 -> s1: 100 files rewritten, 5 deleted, 5 created, 2 directories (1000 files each) moved. $RUNS alternating pairs after $WARMUP warm-up pairs; times in ms, median (min-max); ratio = rsend/kernel per pair."
    echo
    echo "| files | kernel \`btrfs send -p\` ms | rsend ms | ratio | rsend peak RSS | kernel stream bytes | rsend stream bytes |"
    echo "|---:|---:|---:|---:|---:|---:|---:|"
    printf '%s\n' "${ROWS[@]}"
    echo
    echo "CPU time, median ms (the kernel's send runs in the btrfs process's system time); rsend's pread calls (16 KiB tree blocks and file data):"
    echo
    echo "| files | kernel CPU | rsend CPU | CPU ratio | rsend preads | of them 16 KiB tree blocks | rsend max RSS over runs | btrfs-progs RSS |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
    printf '%s\n' "${DETAIL[@]}"
    if (( ${#PROFILES[@]} )); then
        echo
        echo "Where rsend's CPU time goes (perf, $PROFILE_RUNS runs per tree, benches/perf_breakdown.py):"
        echo
        python3 "$REPO/benches/perf_breakdown.py" "$PROFILE_RUNS" "$PERF_FREQ" "${PROFILES[@]}"
    fi
    echo
    echo "Goals: 100k files <= 1.0 x kernel; time grows with the change, not the tree; rsend peak RSS <= 128 MiB on 1M."
} | tee "$TMP/summary.md"
if [[ -n $RESULTS_DIR ]]; then
    cp "$TMP/summary.md" "$RESULTS_DIR/"
fi
