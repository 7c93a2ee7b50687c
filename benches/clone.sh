#!/bin/bash
# Benchmark sends of heavily shared extents (clone search): `rsend -d IMAGE`
# (read from the image file, no kernel) against the kernel's `btrfs send` on
# the same image mounted read-only, in one run, warm cache, both to
# /dev/null, alternating kernel, rsend, kernel, rsend, ...
#
# Usage: sudo benches/clone.sh
#        quick look (about a minute):
#        RUNS=3 WARMUP=0 VERIFY=0 sudo benches/clone.sh
#
# Cases (the data is made by the running kernel through a loop mount; the
# counts below are from one build and vary a little between builds):
#   a   btrfs/130 scaled. Subvolume `vol`: file f1 gets 128 KiB of
#       pseudo-random data (one 128 KiB extent), then `xfs_io reflink` of
#       f1's first 128 KiB to every other 128 KiB offset of f1 (REFLINKS =
#       2,048 file extent items, a 256 MiB file); f2, f3, f4 are
#       `cp --reflink=always` copies of f1; then read-only snapshots s1..s4
#       of `vol`. The one data extent has 8,192 references (4 x 2,048; the
#       snapshots share the leaves, so they add none). Sent: s1, full.
#       The kernel gives up on extents with more than 1,024 references and
#       writes all 1 GiB. Goal: time <= kernel, bytes <= 1 % of kernel's.
#   b   The pathological file. Subvolume `vol`: `fallocate -l 1G file`
#       (four 256 MiB preallocated extents), then WRITES = 76,000 random
#       4 KiB writes (`xfs_io pwrite`, offsets uniform over the 262,144
#       blocks of the file, seed 76, fill byte 1..255 by write number) in 11
#       batches, each ending in fsync and `btrfs filesystem sync`; read-only
#       snapshot `snap`. First writes land in place in the preallocated
#       extents: about 53,600 regular and 49,275 preallocated file extent
#       items point into the four of them (about 23,500 references each);
#       rewrites of a block got about 9,100 new 4-8 KiB extents. Sent: snap,
#       full, alone. The kernel skips clone search (> 1,024 references) and
#       writes the written ranges (270 MB; the preallocated rest is left as
#       holes). Goal: time <= kernel, bytes <= kernel.
#   bc  The same file, the same writes, on its own image, but a read-only
#       snapshot c01..c10 of `vol` after each of the first 10 batches (every
#       6,909 writes) and `snap` after the 11th. From the first snapshot on,
#       writes into the preallocated extents are copy-on-write, and every
#       leaf rewritten after a snapshot adds references: the four
#       preallocated extents end with about 100,000 references each
#       (through about 3,400 shared-data backrefs, from 12 roots: vol,
#       c01..c10, snap); about 68,000 more data extents of 4-12 KiB have
#       1-11 references; snap has about 114,800 file extent items.
#       Sent: `btrfs send -c c01 .. -c c10 snap`. Without -p, btrfs-progs
#       (cmds/send.c find_good_parent) takes the clone source whose
#       parent_uuid is snap's (all are snapshots of `vol`) with the
#       ctransid closest to vol's: c10, so the send is incremental against
#       c10 with 11 clone roots (c01..c10 and snap); rsend picks the same
#       parent (checked). Its changes: the 11th batch's new 4 KiB extents
#       (28 MB of data) and the preallocated pieces it split, which point
#       into the extents with ~100,000 references; the kernel sends those
#       pieces as WRITEs of zeros (121 MB in 7,663 WRITEs: it only takes
#       unchanged *regular* extents as unchanged, and it does not search
#       for clones of extents with more than 1,024 references).
#       Goal: time <= kernel, bytes <= kernel.
#   bp  The bc image, `btrfs send -p c01 -c c02 .. -c c10 snap`: incremental
#       against the oldest snapshot, so the changes of batches 2..11 are
#       sent and most of their new extents are in c02..c10; here the kernel
#       does clone search across roots and sends about 53,600 CLONEs
#       (220 MB, of extents with at most 11 references), next to 824 MB of
#       WRITEs (mostly the zeros of split preallocated ranges). Not one of
#       the issue's goals; shows clone decisions against many sources.
#   Peak RSS goal for rsend in every case: at most 128 MiB.
#   The cases run in this order (a, b, then bc and bp on one attach).
#
# Environment (all optional):
#   CASES="a b bc bp"  cases to run
#   RUNS=9         timed pairs per case (at least 3)
#   WARMUP=1       untimed pairs first
#   COLD=          1: also one cold pair per case (drop_caches before each
#                  tool)
#   VERIFY=1       0: skip the correctness check (below)
#   REFLINKS=2048  file extent items of f1 in case a
#   WRITES=76000   random writes in cases b, bc, bp (the figures above are
#                  for the defaults)
#   IMG_DIR=/var/tmp/rsend-bench-clone
#                  where the built images are kept between runs (sparse; all
#                  three take about 1.3 GB on disk and about 25 s to build;
#                  their file contents are fixed, their extent layout varies
#                  a little between builds with the kernel's writeback)
#   REBUILD=       1: build the images again even when cached
#   RESULTS_DIR=   copy the per-case JSON, RSS reports and the summary here
#   TMPDIR=/tmp    scratch space: streams (up to 2 GB) and the receive
#                  filesystem (up to ~5 GB written)
#
# Timing: the image is attached read-only (losetup -r) and mounted -o ro
# for the kernel; rsend reads the same image file (both share its page
# cache). Both streams are made once to files (bytes, cmp, `rdump
# --summary`: WRITE and CLONE counts and bytes, the parent chosen). Then
# time_pairs (common.sh): WARMUP + RUNS alternating pairs of
#   btrfs send -q [ARGS] MNT/SUBVOL > /dev/null
#   rsend -q -d IMAGE [ARGS] -f /dev/null SUBVOL
# wall and CPU time and peak RSS from wait4; ratio rsend/kernel per pair;
# reported as median (min-max). /usr/bin/time -v gives the peak RSS once
# more.
#
# Correctness (VERIFY=1), once per case, after the timings of all cases on
# the same image (so that no receive's writeback falls into a timing): both
# streams are
# received with `btrfs receive` onto a scratch btrfs (for bc and bp after the
# chain c01, c01->c02, .., c09->c10 sent by the kernel) and the received
# tree is compared with the source snapshot (`diff -r`: names and file
# contents). A failure of the kernel's stream stops the script; a failure of
# rsend's is reported in the summary. This takes about a minute (the
# c01..c10 chain about 20 s). The whole script: about 4 minutes with the
# defaults on 2 cores, 25 s of it building the images the first time.
#
# Dataset facts (from `btrfs inspect-internal dump-tree` of the extent tree
# and of the sent snapshot's tree, once per image, kept next to it as
# IMAGE.facts): data extents, references per extent, file extent items.
set -euo pipefail
BENCH=clone.sh
# shellcheck source=benches/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

CASES=${CASES:-a b bc bp}
RUNS=${RUNS:-9}
WARMUP=${WARMUP:-1}
COLD=${COLD:-}
VERIFY=${VERIFY:-1}
REFLINKS=${REFLINKS:-2048}
WRITES=${WRITES:-76000}
SOURCES=10
IMG_DIR=${IMG_DIR:-/var/tmp/rsend-bench-clone}
REBUILD=${REBUILD:-}
RESULTS_DIR=${RESULTS_DIR:-}
(( RUNS >= 3 )) || die "RUNS must be at least 3"
for c in $CASES; do
    [[ $c == a || $c == b || $c == bc || $c == bp ]] || die "unknown case $c (CASES: a b bc bp)"
done

need_pkg /usr/bin/time time
need_pkg xfs_io xfsprogs
for t in btrfs mkfs.btrfs losetup python3 cmp diff fallocate; do
    command -v "$t" >/dev/null || die "$t not found"
done
build_rsend rsend
build_rdump

scratch_dir rsend-clone-bench
MNT="$TMP/mnt"
RECV="$TMP/recv"
mkdir "$MNT" "$RECV"
mkdir -p "$IMG_DIR"
T_START=$EPOCHREALTIME

# ---------------------------------------------------------------------------
# the data (the generators' text is part of the images' cache keys)

gen_a() { # gen_a MNT: case a
    local m=$1 i
    btrfs -q subvolume create "$m/vol"
    python3 -c 'import random, sys; sys.stdout.buffer.write(random.Random(130).randbytes(128 << 10))' \
        >"$TMP/extent.bin"
    xfs_io -f -c "pwrite -q -i $TMP/extent.bin 0 128k" -c fsync "$m/vol/f1"
    for ((i = 1; i < REFLINKS; i++)); do
        echo "reflink -q $m/vol/f1 0 $((i * 131072)) 131072"
    done | xfs_io "$m/vol/f1" 2>"$TMP/xfs_io.err"
    [[ ! -s $TMP/xfs_io.err ]] || die "xfs_io reflink: $(head -3 "$TMP/xfs_io.err")"
    xfs_io -c fsync "$m/vol/f1"
    for i in 2 3 4; do
        cp --reflink=always "$m/vol/f1" "$m/vol/f$i"
    done
    btrfs filesystem sync "$m"
    for i in 1 2 3 4; do
        btrfs -q subvolume snapshot -r "$m/vol" "$m/s$i"
    done
}

# the random writes: BATCHES xfs_io command files, each ending in fsync
WRITES_PY='
import random, sys
writes, batches, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rnd = random.Random(76)
blocks = (1 << 30) // 4096
for b in range(batches):
    with open(f"{out}/batch{b + 1:02d}", "w") as f:
        for i in range(writes * b // batches, writes * (b + 1) // batches):
            f.write(f"pwrite -q -S 0x{i % 255 + 1:02x} {rnd.randrange(blocks) * 4096} 4096\n")
        f.write("fsync\n")
'

gen_b() { # gen_b SNAPSHOTS MNT: cases b (SNAPSHOTS=0) and bc/bp (SNAPSHOTS=1)
    local snaps=$1 m=$2 k n=$((SOURCES + 1))
    btrfs -q subvolume create "$m/vol"
    fallocate -l 1G "$m/vol/file"
    btrfs filesystem sync "$m"
    rm -rf "$TMP/writes"
    mkdir "$TMP/writes"
    python3 -c "$WRITES_PY" "$WRITES" "$n" "$TMP/writes"
    for ((k = 1; k <= n; k++)); do
        xfs_io "$m/vol/file" <"$TMP/writes/$(printf batch%02d "$k")" 2>"$TMP/xfs_io.err"
        [[ ! -s $TMP/xfs_io.err ]] || die "xfs_io pwrite: $(head -3 "$TMP/xfs_io.err")"
        btrfs filesystem sync "$m"
        if (( snaps && k < n )); then
            btrfs -q subvolume snapshot -r "$m/vol" "$m/$(printf c%02d "$k")"
        fi
    done
    btrfs -q subvolume snapshot -r "$m/vol" "$m/snap"
}

KEY=$(printf '%s\n' "$(declare -f gen_a gen_b)" "$WRITES_PY" "$REFLINKS $WRITES $SOURCES" | sha256sum | cut -c1-12)
IMG_A="$IMG_DIR/clone-a-$KEY.img"
IMG_B="$IMG_DIR/clone-b-$KEY.img"
IMG_C="$IMG_DIR/clone-bc-$KEY.img"

# dataset_facts IMG SUBVOL: counts from dump-tree, cached as IMG.facts
FACTS_PY='
import re, sys
subvol, build_s, apparent, alloc = sys.argv[1:5]
ext_tree, fs_tree = open(sys.argv[5]), open(sys.argv[6])
refs, shared, keyed = [], 0, 0
item = None
for line in ext_tree:
    m = re.search(r"key \(\d+ (EXTENT_ITEM|SHARED_DATA_REF|EXTENT_DATA_REF) \d+\) itemoff", line)
    if m:
        item = m.group(1)
        shared += item == "SHARED_DATA_REF"
        keyed += item == "EXTENT_DATA_REF"
        continue
    if item == "EXTENT_ITEM":
        m = re.search(r"refs (\d+) gen \d+ flags DATA", line)
        if m:
            refs.append(int(m.group(1)))
        item = None
types = {}
last_key = False
for line in fs_tree:
    if re.search(r"key \(\d+ EXTENT_DATA \d+\) itemoff", line):
        last_key = True
        continue
    if last_key:
        m = re.search(r"type \d+ \((\w+)\)", line)
        if m:
            types[m.group(1)] = types.get(m.group(1), 0) + 1
        last_key = False
big = [r for r in refs if r > 1024]
items = sum(types.values())
kinds = ", ".join(f"{n:,} {t}" for t, n in sorted(types.items()))
top = ", ".join(f"{r:,}" for r in sorted(refs, reverse=True)[:4])
print(f"built in {float(build_s):.1f} s; image {int(apparent) >> 30} GiB sparse, {int(alloc) >> 20} MiB allocated; "
      f"{len(refs):,} data extents, {sum(refs):,} references (largest: {top}), "
      f"{len(big):,} with more than 1,024; keyed shared-data refs {shared:,}, keyed extent-data refs {keyed:,}; "
      f"{subvol}: {items:,} file extent items ({kinds})")
'
dataset_facts() { # dataset_facts IMG SUBVOL
    local img=$1 sv=$2 id
    if [[ -f $img.facts && $BUILD_SECONDS == 0 ]]; then
        return
    fi
    id=$("$RSEND" -d "$img" --list | awk -v p="$sv" '$NF == p { print $2 }')
    [[ -n $id ]] || die "no subvolume $sv in $img"
    btrfs inspect-internal dump-tree -t extent "$img" >"$TMP/extent-tree.txt"
    btrfs inspect-internal dump-tree -t "$id" "$img" >"$TMP/fs-tree.txt"
    python3 -c "$FACTS_PY" "$sv" "$BUILD_SECONDS" "$(stat -c %s "$img")" "$(($(stat -c %b "$img") * 512))" \
        "$TMP/extent-tree.txt" "$TMP/fs-tree.txt" >"$img.facts"
    rm -f "$TMP/extent-tree.txt" "$TMP/fs-tree.txt"
}

NEED_A='' NEED_B='' NEED_C=''
for c in $CASES; do
    case $c in
        a) NEED_A=1 ;;
        b) NEED_B=1 ;;
        bc | bp) NEED_C=1 ;;
    esac
done
FACTS=()
if [[ -n $NEED_A ]]; then
    log "image a: $REFLINKS reflinks of one 128 KiB extent, 4 files, 4 snapshots"
    build_cached_image "$IMG_A" 2G "$MNT" gen_a
    dataset_facts "$IMG_A" s1
    FACTS+=("| a | $(cat "$IMG_A.facts") |")
fi
if [[ -n $NEED_B ]]; then
    log "image b: 1 GiB fallocated, $WRITES random 4 KiB writes"
    build_cached_image "$IMG_B" 4G "$MNT" gen_b 0
    dataset_facts "$IMG_B" snap
    FACTS+=("| b | $(cat "$IMG_B.facts") |")
fi
if [[ -n $NEED_C ]]; then
    log "image bc: the same, snapshots c01..c10 during the writes"
    build_cached_image "$IMG_C" 4G "$MNT" gen_b 1
    dataset_facts "$IMG_C" snap
    FACTS+=("| bc, bp | $(cat "$IMG_C.facts") |")
fi
T_BUILT=$EPOCHREALTIME

# ---------------------------------------------------------------------------
# one case

# stream_facts STREAM: "writes bytes_written clones bytes_cloned parent_uuid"
stream_facts() {
    "$RDUMP" --summary "$1" | awk '
        $1 == "write" { w = $2 } $1 == "clone" { c = $2 }
        $1 == "bytes" && $2 == "written" { bw = $3 } $1 == "bytes" && $2 == "cloned" { bc = $3 }
        $1 == "parent" && $2 == "uuid" { sub(/^uuid=/, "", $3); p = $3 }
        END { printf "%d %d %d %d %s\n", w, bw, c, bc, (p == "" ? "-" : p) }'
}

subvol_name() { # subvol_name IMG UUID: the subvolume's path, or "-"
    [[ $2 == - ]] && { echo -; return; }
    "$RSEND" -d "$1" --list | awk -v u="$2" '{ for (i = 1; i < NF; i++) if ($i == "uuid" && $(i + 1) == u) print $NF }'
}

RECV_IMG=
BASE_DONE=
recv_fs() { # a fresh scratch btrfs on RECV, once per image
    [[ -n $RECV_IMG ]] && return
    RECV_IMG="$TMP/recv.img"
    truncate -s 32G "$RECV_IMG"
    mkfs.btrfs -q -f "$RECV_IMG" >/dev/null
    loop_mount "$RECV_IMG" "$RECV"
    BASE_DONE=
}
recv_fs_done() {
    [[ -z $RECV_IMG ]] && return
    loop_umount "$RECV"
    rm -f "$RECV_IMG" # its dirty pages go with it, never written back
    RECV_IMG=
}

receive_base() { # the c01..c10 chain, from the kernel, for bc and bp
    [[ -n $BASE_DONE ]] && return
    local k prev cur t0=$EPOCHREALTIME
    log "receiving c01..c10 (kernel streams, c01 full, then each against the one before)"
    mkdir -p "$RECV/base"
    btrfs send -q "$MNT/c01" | btrfs receive -q "$RECV/base"
    for ((k = 2; k <= SOURCES; k++)); do
        prev=$(printf c%02d $((k - 1)))
        cur=$(printf c%02d "$k")
        btrfs send -q -p "$MNT/$prev" "$MNT/$cur" | btrfs receive -q "$RECV/base"
    done
    BASE_DONE=1
    log "base chain received in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s"
}

# check_receive TOOL CASE SUBVOL: receive TMP/CASE-TOOL.stream, diff it with
# the source; prints "ok" or what went wrong
check_receive() {
    local tool=$1 name=$2 sv=$3 dst="$RECV/$2-$1"
    mkdir "$dst"
    if ! btrfs receive -q -f "$TMP/$name-$tool.stream" "$dst" 2>"$TMP/recv-$tool.err"; then
        echo "receive failed: $(grep -v '^$' "$TMP/recv-$tool.err" | head -1)"
        return
    fi
    if diff -r --no-dereference "$MNT/$sv" "$dst/$sv" >"$TMP/diff-$tool.txt" 2>&1; then
        echo "ok"
    else
        echo "received, contents DIFFER ($(head -1 "$TMP/diff-$tool.txt"))"
    fi
}

ROWS=()
CONTENT=()
GOALS=()
COLDROWS=()
LOAD=()
declare -A SUBVOL KFACTS RFACTS

commas() { python3 -c 'import sys; print(f"{int(sys.argv[1]):,}")' "$1"; }
ms() { awk -v s="$1" 'BEGIN { printf "%.0f", s * 1000 }'; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }'; }

# measure_case NAME IMG SUBVOL "KERNEL ARGS" "RSEND ARGS": both streams once
# (kept as TMP/NAME-{kernel,rsend}.stream for verify_case), the timed pairs,
# peak RSS, the cold pair
measure_case() {
    local name=$1 img=$2 sv=$3 kargs=$4 rargs=$5 ks rs kb rb same kf rf rss j t_case=$EPOCHREALTIME
    ks="$TMP/$name-kernel.stream"
    rs="$TMP/$name-rsend.stream"
    log "case $name: streams once (btrfs send $kargs $sv / rsend $rargs $sv)"
    # shellcheck disable=SC2086 # the argument lists are word lists
    btrfs send -q $kargs -f "$ks" "$MNT/$sv"
    # shellcheck disable=SC2086
    "$RSEND" -q -d "$img" $rargs -f "$rs" "$sv"
    sync "$ks" "$rs" # written back now, not during the timing
    kb=$(stat -c %s "$ks")
    rb=$(stat -c %s "$rs")
    if cmp -s "$ks" "$rs"; then same=identical; else same=different; fi
    read -r -a kf <<<"$(stream_facts "$ks")"
    read -r -a rf <<<"$(stream_facts "$rs")"
    kf[4]=$(subvol_name "$img" "${kf[4]}")
    rf[4]=$(subvol_name "$img" "${rf[4]}")
    echo "case $name: kernel $kb bytes (${kf[0]} writes, ${kf[2]} clones), rsend $rb bytes (${rf[0]} writes, ${rf[2]} clones), $same" >&2
    [[ ${kf[4]} == "${rf[4]}" ]] ||
        echo "$BENCH: WARNING: case $name: parents differ: kernel ${kf[4]}, rsend ${rf[4]}" >&2
    SUBVOL[$name]=$sv
    KFACTS[$name]="${kf[*]}"
    RFACTS[$name]="${rf[*]}"

    log "case $name: $WARMUP + $RUNS alternating pairs"
    j="$TMP/clone-$name.json"
    time_pairs "$RUNS" "$WARMUP" "$j" \
        kernel "btrfs send -q $kargs '$MNT/$sv'" \
        rsend "'$RSEND' -q -d '$img' $rargs -f /dev/null $sv"
    LOAD+=("$name: $(cut -d' ' -f1-3 /proc/loadavg)")

    log "case $name: peak RSS (/usr/bin/time -v)"
    # shellcheck disable=SC2086
    /usr/bin/time -v -o "$TMP/rss-rsend-$name" "$RSEND" -q -d "$img" $rargs -f /dev/null "$sv"
    # shellcheck disable=SC2086
    /usr/bin/time -v -o "$TMP/rss-kernel-$name" btrfs send -q $kargs "$MNT/$sv" >/dev/null
    rss=$(maxrss "$TMP/rss-rsend-$name")

    if [[ -n $COLD ]]; then
        local t0 kc rc
        log "case $name: one cold pair"
        echo 3 >/proc/sys/vm/drop_caches # the image is clean: all of it goes
        t0=$EPOCHREALTIME
        # shellcheck disable=SC2086
        btrfs send -q $kargs "$MNT/$sv" >/dev/null
        kc=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')
        echo 3 >/proc/sys/vm/drop_caches
        t0=$EPOCHREALTIME
        # shellcheck disable=SC2086
        "$RSEND" -q -d "$img" $rargs -f /dev/null "$sv"
        rc=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')
        COLDROWS+=("| $name | $(ms "$kc") | $(ms "$rc") | $(awk -v k="$kc" -v r="$rc" 'BEGIN { printf "%.2f", r / k }') |")
    fi

    ROWS+=("$(python3 - "$j" "$name" "$rss" "$kb" "$rb" "$same" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
name, rss, kb, rb, same = sys.argv[2:]
ms = lambda d: f"{d['median'] * 1000:,.0f} ({d['min'] * 1000:,.0f}-{d['max'] * 1000:,.0f})"
r = s["ratio"]
print(f"| {name} | {ms(s['kernel'])} | {ms(s['rsend'])} | **{r['median']:.2f}** ({r['min']:.2f}-{r['max']:.2f}) "
      f"| {int(kb):,} | {int(rb):,} ({same}) | {100 * int(rb) / int(kb):.1f} % | {int(rss) / 1024:.1f} MiB |")
PY
)")
    GOALS+=("$(python3 - "$j" "$name" "$rss" "$kb" "$rb" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
name, rss, kb, rb = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
t = s["ratio"]["median"]
yes = lambda ok: "met" if ok else "NOT met"
if name == "a":
    byte_goal = f"bytes <= 1 % of kernel: {yes(rb <= 0.01 * kb)} ({100 * rb / kb:.1f} %)"
elif name == "bp":
    byte_goal = f"bytes vs kernel (no goal): {100 * rb / kb:.1f} %"
else:
    byte_goal = f"bytes <= kernel: {yes(rb <= kb)} ({100 * rb / kb:.1f} %)"
print(f"- {name}: time <= kernel: {yes(t <= 1.0)} ({t:.2f}); {byte_goal}; "
      f"peak RSS <= 128 MiB: {yes(rss <= 128 * 1024)} ({rss / 1024:.1f} MiB)")
PY
)")
    if [[ -n $RESULTS_DIR ]]; then
        mkdir -p "$RESULTS_DIR"
        cp "$j" "$RESULTS_DIR/"
        cp "$TMP/rss-rsend-$name" "$RESULTS_DIR/rss-rsend-$name.txt"
        cp "$TMP/rss-kernel-$name" "$RESULTS_DIR/rss-kernel-$name.txt"
    fi
    log "case $name: measured in $(since "$t_case") s"
}

# verify_case NAME: receive both streams (VERIFY=1), compare, drop them;
# adds the case's CONTENT row
verify_case() {
    local name=$1 sv=${SUBVOL[$1]} ok_k=- ok_r=- kf rf t_case=$EPOCHREALTIME
    read -r -a kf <<<"${KFACTS[$name]}"
    read -r -a rf <<<"${RFACTS[$name]}"
    if [[ $VERIFY == 1 ]]; then
        log "case $name: receiving both streams, comparing with the source"
        recv_fs
        if [[ $name == bc || $name == bp ]]; then receive_base; fi
        ok_k=$(check_receive kernel "$name" "$sv")
        [[ $ok_k == ok ]] || die "case $name: the kernel's stream: $ok_k"
        ok_r=$(check_receive rsend "$name" "$sv")
        [[ $ok_r == ok ]] || echo "$BENCH: WARNING: case $name: rsend's stream: $ok_r" >&2
        btrfs -q subvolume delete "$RECV/$name-kernel/$sv" 2>/dev/null || true
        btrfs -q subvolume delete "$RECV/$name-rsend/$sv" 2>/dev/null || true
        log "case $name: verified in $(since "$t_case") s"
    fi
    rm -f "$TMP/$name-kernel.stream" "$TMP/$name-rsend.stream"
    CONTENT+=("| $name | $(commas "${kf[0]}") / $(commas "${kf[1]}") | $(commas "${kf[2]}") / $(commas "${kf[3]}") \
| $(commas "${rf[0]}") / $(commas "${rf[1]}") | $(commas "${rf[2]}") / $(commas "${rf[3]}") | ${kf[4]} | $ok_k | $ok_r |")
}

sources() { # sources PREFIX FIRST LAST: "-c PREFIXc01 -c PREFIXc02 ..."
    local k
    for ((k = $2; k <= $3; k++)); do
        printf -- '-c %sc%02d ' "$1" "$k"
    done
}

# run_image IMG CASE...: all timings first, then the receives (so that
# their writeback does not fall into a timing)
run_image() {
    local img=$1 c
    shift
    log "attaching $(basename "$img") read-only, mounting -o ro for btrfs send"
    loop_mount "$img" "$MNT" ro
    warm_cache "$img"
    for c in "$@"; do
        case $c in
            a) measure_case a "$img" s1 "" "" ;;
            b) measure_case b "$img" snap "" "" ;;
            bc) measure_case bc "$img" snap "$(sources "$MNT/" 1 $SOURCES)" "$(sources "" 1 $SOURCES)" ;;
            bp) measure_case bp "$img" snap "-p $MNT/c01 $(sources "$MNT/" 2 $SOURCES)" \
                "-p c01 $(sources "" 2 $SOURCES)" ;;
        esac
    done
    for c in "$@"; do
        verify_case "$c"
    done
    recv_fs_done
    loop_umount "$MNT"
}

want() { [[ " $CASES " == *" $1 "* ]]; }
if want a; then run_image "$IMG_A" a; fi
if want b; then run_image "$IMG_B" b; fi
C_CASES=()
want bc && C_CASES+=(bc)
want bp && C_CASES+=(bp)
if (( ${#C_CASES[@]} )); then run_image "$IMG_C" "${C_CASES[@]}"; fi
T_END=$EPOCHREALTIME

# ---------------------------------------------------------------------------
# summary

secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", b - a }'; }
{
    echo
    echo "machine: $(machine_line); $("$RSEND" --version)"
    echo "load average (1/5/15 min) after each case: ${LOAD[*]}"
    echo "run: $(secs "$T_START" "$T_BUILT") s building or finding the images, $(secs "$T_BUILT" "$T_END") s benchmarking (RUNS=$RUNS, WARMUP=$WARMUP, VERIFY=$VERIFY)"
    echo
    echo "Datasets (dump-tree of the extent tree and of the sent snapshot):"
    echo
    echo "| image | facts |"
    echo "|:---|:---|"
    printf '%s\n' "${FACTS[@]}"
    echo
    echo "$RUNS alternating pairs after $WARMUP warm-up pairs, warm cache, both to /dev/null; times in ms, median (min-max); ratio = rsend/kernel per pair."
    echo
    echo "| case | kernel \`btrfs send\` ms | rsend ms | ratio | kernel stream bytes | rsend stream bytes | rsend/kernel bytes | rsend peak RSS |"
    echo "|:---|---:|---:|---:|---:|---:|---:|---:|"
    printf '%s\n' "${ROWS[@]}"
    echo
    echo "What the streams hold (rdump --summary), and whether \`btrfs receive\` of each gives the source's contents:"
    echo
    echo "| case | kernel WRITEs / bytes | kernel CLONEs / bytes | rsend WRITEs / bytes | rsend CLONEs / bytes | parent (kernel's; rsend's is checked to match) | kernel stream received | rsend stream received |"
    echo "|:---|---:|---:|---:|---:|:---|:---|:---|"
    printf '%s\n' "${CONTENT[@]}"
    if (( ${#COLDROWS[@]} )); then
        echo
        echo "One cold pair (drop_caches before each tool), ms:"
        echo
        echo "| case | kernel | rsend | ratio |"
        echo "|:---|---:|---:|---:|"
        printf '%s\n' "${COLDROWS[@]}"
    fi
    echo
    echo "Goals:"
    printf '%s\n' "${GOALS[@]}"
} | tee "$TMP/summary.md"
if [[ -n $RESULTS_DIR ]]; then
    mkdir -p "$RESULTS_DIR"
    cp "$TMP/summary.md" "$RESULTS_DIR/"
fi
