#!/bin/bash
# Benchmark `rsend --verify` (compare a snapshot, read from the btrfs image
# without the kernel, with a copy of it on another filesystem) against the
# usual way to check such a copy: `rsync -aHAXc --dry-run --delete -i`
# between the mounted snapshot and the copy. The tree is a `cp -a` copy of
# this machine's /usr (about 5 GB, 130k entries: hard links, setuid files,
# file capabilities), read-only snapshot `usr`; the copy is made on ext4 by
# `rsend -d IMG usr | rreceive EXT4MNT`.
#
# Usage: sudo benches/verify.sh           (full /usr; see Runtime)
#        sudo QUICK=1 benches/verify.sh   (/usr/share only, a few minutes)
#
# Goals: rsend --verify in at most 0.5 x rsync's time, warm cache; it must
# find the copy identical (exit 0: any difference it lists is either a
# receive bug or a verify bug, and the script says so and exits 1 after the
# timing). Peak RSS of both and one cold-cache run of each are reported (no
# goal).
#
# Environment (all optional):
#   QUICK=         1: SRC=/usr/share, RUNS=3 (the images are cached apart)
#   SRC=/usr       the tree copied into the btrfs image (its cache key is
#                  the path: REBUILD=1 after the tree changed)
#   RUNS=5         timed pairs, warm cache (rsync, rsend, rsync, rsend, ...)
#   WARMUP=1       untimed pairs first (after both trees were read once)
#   COLD=1         0: skip the cold-cache runs
#   IMG_DIR=/var/tmp/rsend-bench-verify
#                  where the images are kept between runs (sparse files;
#                  /usr: about 5.2 GB (btrfs) + 5.1 GB (ext4) allocated)
#   REBUILD=       1: build both images again; the ext4 copy is also
#                  rebuilt whenever the btrfs image is newer than it
#   PROFILE=       1: also `perf record -g` one warm rsend --verify and
#                  print its top symbols (perf report; all of it in RESULTS_DIR)
#   SPLIT=1        0: skip the phase split: after the pairs, warm, 3 runs
#                  each of rsync without -c (the walk and metadata alone),
#                  rsync -c, rsend, and RSEND_ALT if given
#   RSEND_ALT=     another rsend binary (say a patched build) to time in the
#                  split, warm, the same way
#   RESULTS_DIR=   copy the per-run JSON, listings, RSS reports, the table
#   TMPDIR=/tmp    scratch space (mount points, listings; small)
#
# Runtime here (2 vCPUs, 23 GB RAM): full /usr about 6 minutes the first
# time (the two images take about 80 s), about 4.5 minutes after (warm
# pairs 1 minute, cold runs 1.5 minutes, warming and the split the rest);
# QUICK=1 about 2.5 minutes the first time, about 1 minute after.
#
# Method. btrfs image (mkfs.btrfs defaults: crc32c, no compression): subvolume
# vol, `cp -a SRC/. vol/`, `btrfs subvolume snapshot -r vol usr`. ext4 image
# (mkfs.ext4 with the inode tables written at mkfs, so no lazy init runs
# during the timing), mounted, `rsend -q -d BTRFS_IMG usr | rreceive -q
# EXT4MNT` (which makes EXT4MNT/usr). For the timing the btrfs image is
# attached read-only and mounted -o ro (the loop device reads through the
# image file's page cache, which rsend reads too); the ext4 image is
# attached read-only with --direct-io=on and mounted -o ro (so its data is
# cached once, by ext4, not a second time as the image file's pages: the
# three caches, image, btrfs files and ext4 files, then fit in memory).
# Warm: the btrfs image file read into the page cache (holes skipped), both
# trees read once through their mounts (every file's data, every xattr),
# then WARMUP pairs. A = `rsend -q -d BTRFS_IMG --verify EXT4MNT/usr usr`,
# B = `rsync -aHAXc --dry-run --delete -i MNT/usr/ EXT4MNT/usr/`, both to
# /dev/null, alternated by time_pairs (common.sh): wall and CPU time from
# wait4, ratio = rsend / rsync per pair. Before the timing each runs once
# untimed: exit codes, rsend's listing (with its notes on stderr) and
# rsync's itemized changes are kept and counted. Peak RSS: one more warm
# run of each with every process's VmHWM sampled every 10 ms (rsync runs
# as three processes: their sum is given, and the largest alone, as wait4
# and /usr/bin/time report it). Cold: `sync; echo 3 >
# /proc/sys/vm/drop_caches` before one run of A and one of B.
set -euo pipefail
BENCH=verify.sh
# shellcheck source=benches/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

QUICK=${QUICK:-}
if [[ -n $QUICK ]]; then
    SRC=${SRC:-/usr/share}
    RUNS=${RUNS:-3}
else
    SRC=${SRC:-/usr}
    RUNS=${RUNS:-5}
fi
WARMUP=${WARMUP:-1}
COLD=${COLD:-1}
IMG_DIR=${IMG_DIR:-/var/tmp/rsend-bench-verify}
REBUILD=${REBUILD:-}
PROFILE=${PROFILE:-}
SPLIT=${SPLIT:-1}
RSEND_ALT=${RSEND_ALT:-}
RESULTS_DIR=${RESULTS_DIR:-}
SNAP=usr
(( RUNS >= 1 )) || die "RUNS must be at least 1"
[[ -d $SRC ]] || die "SRC=$SRC is not a directory"
[[ -z $RSEND_ALT || -x $RSEND_ALT ]] || die "RSEND_ALT=$RSEND_ALT is not executable"
SRC=$(realpath "$SRC")

need_pkg /usr/bin/time time
need_pkg rsync rsync
[[ -z $PROFILE ]] || need_pkg perf linux-perf
for t in btrfs mkfs.btrfs mkfs.ext4 losetup python3 cp du; do
    command -v "$t" >/dev/null || die "$t not found"
done
build_rsend
cargo_release rreceive
RRECEIVE="$TARGET_DIR/release/rreceive"
[[ -x $RRECEIVE ]] || die "$RRECEIVE was not built"

scratch_dir rsend-verify-bench
MNT="$TMP/btrfs"
EXT="$TMP/ext4"
mkdir "$MNT" "$EXT"
scratch_mount "$MNT"
scratch_mount "$EXT"

KEY=$(echo "${SRC#/}" | tr / -)
[[ -n $KEY ]] || KEY=root
mkdir -p "$IMG_DIR"
IMG="$IMG_DIR/verify-$KEY.btrfs.img"
EIMG="$IMG_DIR/verify-$KEY.ext4.img"

# ---------------------------------------------------------------------------
# images

SRC_KIB=$(du -sxk "$SRC" | cut -f1)
SRC_ENTRIES=$(find "$SRC" -xdev | wc -l)
log "source $SRC: $((SRC_KIB / 1024)) MiB allocated, $SRC_ENTRIES entries"

copy_tree() { # copy_tree MNT: the btrfs image's contents
    btrfs -q subvolume create "$1/vol"
    log "cp -a $SRC/. into the btrfs image"
    cp -a "$SRC/." "$1/vol/"
    btrfs -q subvolume snapshot -r "$1/vol" "$1/$SNAP"
}
build_cached_image "$IMG" "$((SRC_KIB * 2 / 1024 + 2048))M" "$MNT" copy_tree
BTRFS_BUILD=$BUILD_SECONDS

EXT_BUILD=0
if [[ ! -f $EIMG || -n $REBUILD || $IMG -nt $EIMG ]]; then
    log "building the ext4 copy $EIMG: rsend -d $IMG $SNAP | rreceive"
    _PARTIAL="$EIMG.partial"
    t0=$EPOCHREALTIME
    rm -f "$_PARTIAL"
    truncate -s "$((SRC_KIB * 3 / 2 / 1024 + 2048))M" "$_PARTIAL"
    mkfs.ext4 -q -F -N "$((SRC_ENTRIES * 2 + 65536))" \
        -E lazy_itable_init=0,lazy_journal_init=0 "$_PARTIAL"
    loop_mount "$_PARTIAL" "$EXT"
    set +e
    "$RSEND" -q -d "$IMG" "$SNAP" | "$RRECEIVE" -q "$EXT"
    rc=("${PIPESTATUS[@]}")
    set -e
    [[ ${rc[0]} == 0 && ${rc[1]} == 0 ]] ||
        die "the copy failed: rsend exit ${rc[0]}, rreceive exit ${rc[1]}"
    [[ -d $EXT/$SNAP ]] || die "rreceive made no $EXT/$SNAP"
    df -h "$EXT" | sed 's/^/   /' >&2
    loop_umount "$EXT"
    sync "$_PARTIAL"
    mv "$_PARTIAL" "$EIMG"
    _PARTIAL=
    EXT_BUILD=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
    log "ext4 copy made in $EXT_BUILD s"
else
    log "cached ext4 copy $EIMG"
fi

# ---------------------------------------------------------------------------
# mounts and a warm cache

log "attaching both images read-only, mounting -o ro"
scratch_image "$IMG"
scratch_image "$EIMG"
BLOOP=$(losetup -r --find --show "$IMG")
mount -o ro "$BLOOP" "$MNT"
ELOOP=$(losetup -r --direct-io=on --find --show "$EIMG")
mount -o ro "$ELOOP" "$EXT"
[[ -d $MNT/$SNAP && -d $EXT/$SNAP ]] || die "no $SNAP in one of the images"

# read_tree DIR: every file's data and every xattr under DIR, through the mount
read_tree() {
    python3 - "$1" <<'PY'
import os, sys
n = b = 0
for top, dirs, files in os.walk(sys.argv[1]):
    for name in dirs + files:
        p = os.path.join(top, name)
        try:
            for x in os.listxattr(p, follow_symlinks=False):
                os.getxattr(p, x, follow_symlinks=False)
        except OSError:
            pass
        n += 1
    for name in files:
        p = os.path.join(top, name)
        if os.path.isfile(p) and not os.path.islink(p):
            with open(p, "rb", buffering=0) as f:
                while chunk := f.read(1 << 20):
                    b += len(chunk)
print(f"{n} entries, {b / 1e9:.2f} GB", file=sys.stderr)
PY
}
warm() {
    log "warming: btrfs image file, the snapshot through its mount, the copy through its mount"
    warm_cache "$IMG"
    read_tree "$MNT/$SNAP"
    read_tree "$EXT/$SNAP"
}
warm
free -m | sed 's/^/   /' >&2

# ---------------------------------------------------------------------------
# once, untimed: what each says

log "once, untimed: rsend --verify (listing kept), rsync -i (itemized changes kept)"
set +e
"$RSEND" -d "$IMG" --verify "$EXT/$SNAP" "$SNAP" >"$TMP/verify.txt" 2>"$TMP/verify.err"
VERIFY_RC=$?
"$RSEND" -q -d "$IMG" --verify "$EXT/$SNAP" "$SNAP" --json >"$TMP/verify.json" 2>"$TMP/verify-json.err"
VERIFY_JSON_RC=$?
rsync -aHAXc --dry-run --delete -i "$MNT/$SNAP/" "$EXT/$SNAP/" >"$TMP/rsync.txt" 2>"$TMP/rsync.err"
RSYNC_RC=$?
set -e
VERIFY_LINES=$(wc -l <"$TMP/verify.txt")
RSYNC_LINES=$(wc -l <"$TMP/rsync.txt")
{
    echo "rsend --verify: exit $VERIFY_RC (--json: exit $VERIFY_JSON_RC, $(wc -l <"$TMP/verify.json") records), $VERIFY_LINES lines listed"
    head -20 "$TMP/verify.txt" | sed 's/^/    /'
    [[ ! -s $TMP/verify.err ]] || { echo "  its standard error:"; head -10 "$TMP/verify.err" | sed 's/^/    /'; }
    echo "rsync -aHAXc --dry-run --delete -i: exit $RSYNC_RC, $RSYNC_LINES itemized lines"
    head -20 "$TMP/rsync.txt" | sed 's/^/    /'
    [[ ! -s $TMP/rsync.err ]] || { echo "  its standard error:"; head -10 "$TMP/rsync.err" | sed 's/^/    /'; }
} | tee "$TMP/check.txt" >&2
(( VERIFY_RC <= 1 )) || die "rsend --verify failed (exit $VERIFY_RC): $(head -3 "$TMP/verify.err")"
(( VERIFY_RC == VERIFY_JSON_RC )) || echo "$BENCH: WARNING: rsend --verify exits $VERIFY_RC, with --json $VERIFY_JSON_RC" >&2
(( VERIFY_RC == 0 )) || echo "$BENCH: WARNING: rsend --verify says the copy differs (exit 1; listing above)" >&2
(( RSYNC_RC == 0 )) || echo "$BENCH: WARNING: rsync exits $RSYNC_RC" >&2

# The commands timed; a command that exits non-zero above is timed through
# a shell that accepts that exit code (time_pairs stops on any other).
RSEND_CMD="'$RSEND' -q -d '$IMG' --verify '$EXT/$SNAP' $SNAP"
RSYNC_CMD="rsync -aHAXc --dry-run --delete -i '$MNT/$SNAP/' '$EXT/$SNAP/'"
accept() { # accept RC CMD: CMD, or a shell running CMD that exits 0 when CMD exits RC
    if [[ $1 == 0 ]]; then echo "$2"; else echo "sh -c '$(echo "$2" | tr "'" '"'); [ \$? -eq $1 ]'"; fi
}
RSEND_T=$(accept "$VERIFY_RC" "$RSEND_CMD")
RSYNC_T=$(accept "$RSYNC_RC" "$RSYNC_CMD")

# ---------------------------------------------------------------------------
# warm, timed

# Both images live on one disk; what it reads during a run (its
# /proc/diskstats sectors) is what the run read, whichever process (the
# tool itself or a loop worker) did the reading.
DISK=$(lsblk -no PKNAME "$(df --output=source "$IMG_DIR" | tail -1)" 2>/dev/null || true)
[[ -n $DISK ]] || DISK=$(basename "$(df --output=source "$IMG_DIR" | tail -1)")
sectors_read() { awk -v d="$DISK" '$3 == d { print $6 }' /proc/diskstats; }

log "$WARMUP + $RUNS alternating pairs, warm: B = $RSYNC_T; A = $RSEND_T"
J="$TMP/verify-$KEY.json"
S0=$(sectors_read)
time_pairs "$RUNS" "$WARMUP" "$J" rsync "$RSYNC_T" rsend "$RSEND_T"
WARM_READ_MB=$(( ($(sectors_read) - S0) * 512 / 1000000 ))
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
BUSY=$(ps -eo pcpu,comm --sort=-pcpu | sed -n 2,4p)

# peak RSS: run_rss OUT CMD...: one run with every process's VmHWM sampled
# every 10 ms; OUT gets "wall_s sum_of_peaks_kib largest_kib processes"
run_rss() {
    python3 - "$@" <<'PY'
import os, sys, time
out, argv = sys.argv[1], sys.argv[2:]
null = os.open("/dev/null", os.O_WRONLY)
t = time.perf_counter()
root = os.fork()
if root == 0:
    os.dup2(null, 1)
    os.execvp(argv[0], argv)
hwm, ppid = {}, {}
def stat(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None
while True:
    done, status, ru = os.wait4(root, os.WNOHANG)
    if done:
        break
    tree = {root}
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) != root:
            pp = ppid.get(int(p)) or stat(p)
            if pp is not None:
                ppid[int(p)] = pp
    grew = True
    while grew:  # descendants of root
        grew = False
        for p, pp in ppid.items():
            if pp in tree and p not in tree and os.path.exists(f"/proc/{p}"):
                tree.add(p)
                grew = True
    for p in tree:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        hwm[p] = max(hwm.get(p, 0), int(line.split()[1]))
        except OSError:
            pass
    time.sleep(0.01)
wall = time.perf_counter() - t
largest = max([ru.ru_maxrss] + list(hwm.values()))
with open(out, "w") as f:
    print(f"{wall:.3f} {sum(hwm.values())} {largest} {len(hwm)} {os.waitstatus_to_exitcode(status)}", file=f)
PY
}
log "peak RSS, one warm run each (VmHWM of every process, sampled)"
run_rss "$TMP/rss-rsend" "$RSEND" -q -d "$IMG" --verify "$EXT/$SNAP" "$SNAP"
run_rss "$TMP/rss-rsync" rsync -aHAXc --dry-run --delete -i "$MNT/$SNAP/" "$EXT/$SNAP/"
/usr/bin/time -v -o "$TMP/time-rsend" "$RSEND" -q -d "$IMG" --verify "$EXT/$SNAP" "$SNAP" >/dev/null || true
/usr/bin/time -v -o "$TMP/time-rsync" rsync -aHAXc --dry-run --delete -i "$MNT/$SNAP/" "$EXT/$SNAP/" >/dev/null || true

PROFILE_TOP=
if [[ -n $PROFILE ]]; then
    log "perf record -g, one warm run of rsend --verify"
    perf record -q -g --call-graph dwarf,16384 -F 499 -o "$TMP/perf.data" -- \
        "$RSEND" -q -d "$IMG" --verify "$EXT/$SNAP" "$SNAP" >/dev/null 2>&1 || true
    perf report -i "$TMP/perf.data" --stdio --no-children --sort dso,symbol -g none --percent-limit 1 \
        2>/dev/null >"$TMP/perf-report.txt" || true
    perf report -i "$TMP/perf.data" --stdio --children --sort symbol -g none --percent-limit 2 \
        2>/dev/null >"$TMP/perf-report-children.txt" || true
    PROFILE_TOP=$(grep -v '^#' "$TMP/perf-report.txt" | grep -v '^$' | head -25 |
        awk '{ printf "%8s  %-18s %s\n", $1, $2, $4 }')
fi

SPLIT_ROWS=
if [[ $SPLIT == 1 ]]; then
    log "phase split, warm: 3 runs each"
    # split NAME CMD...: one table row, median (min-max) wall and CPU of 3 runs
    split_row() {
        python3 - "$@" <<'PY'
import os, shlex, statistics, sys, time
name, argv = sys.argv[1], sys.argv[2:]
env = dict(os.environ)
while "=" in argv[0] and not argv[0].startswith("/"):
    k, v = argv.pop(0).split("=", 1)
    env[k] = v
null = os.open("/dev/null", os.O_WRONLY)
walls, cpus = [], []
for _ in range(3):
    t = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.dup2(null, 1)
        os.execvpe(argv[0], argv, env)
    _, st, ru = os.wait4(pid, 0)
    walls.append(time.perf_counter() - t)
    cpus.append(ru.ru_utime + ru.ru_stime)
    if os.waitstatus_to_exitcode(st) not in (0, 1):
        sys.exit(f"{argv} failed: {st}")
print(f"| {name} | {statistics.median(walls):.2f} ({min(walls):.2f}-{max(walls):.2f}) | {statistics.median(cpus):.2f} |")
PY
    }
    SPLIT_ROWS=$(
        split_row "rsync -aHAX --dry-run --delete -i (no -c: walk and metadata only)" \
            rsync -aHAX --dry-run --delete -i "$MNT/$SNAP/" "$EXT/$SNAP/"
        split_row "rsync -aHAXc (as timed above)" \
            rsync -aHAXc --dry-run --delete -i "$MNT/$SNAP/" "$EXT/$SNAP/"
        split_row "rsend --verify (as timed above)" \
            "$RSEND" -q -d "$IMG" --verify "$EXT/$SNAP" "$SNAP"
        if [[ -n $RSEND_ALT ]]; then
            split_row "RSEND_ALT=$RSEND_ALT --verify" "$RSEND_ALT" -q -d "$IMG" --verify "$EXT/$SNAP" "$SNAP"
        fi
    )
fi

# ---------------------------------------------------------------------------
# cold, once each

COLD_ROWS=
if [[ $COLD == 1 ]]; then
    cold() { # cold NAME OUT CMD...
        local name=$1 out=$2 s0
        shift 2
        log "cold: $name (sync; echo 3 > /proc/sys/vm/drop_caches first)"
        sync
        echo 3 >/proc/sys/vm/drop_caches
        s0=$(sectors_read)
        /usr/bin/time -v -o "$out" "$@" >/dev/null || true
        echo $(( $(sectors_read) - s0 )) >"$out.sectors"
    }
    cold rsend "$TMP/cold-rsend" "$RSEND" -q -d "$IMG" --verify "$EXT/$SNAP" "$SNAP"
    cold rsync "$TMP/cold-rsync" rsync -aHAXc --dry-run --delete -i "$MNT/$SNAP/" "$EXT/$SNAP/"
    COLD_ROWS=$(python3 - "$TMP/cold-rsend" "$TMP/cold-rsync" <<'PY'
import sys
def rep(path):
    d = {}
    for line in open(path):
        k, _, v = line.strip().rpartition(": ")
        d[k] = v
    h, m, s = (["0"] * 3 + d["Elapsed (wall clock) time (h:mm:ss or m:ss)"].split(":"))[-3:]
    wall = int(h) * 3600 + int(m) * 60 + float(s)
    cpu = float(d["User time (seconds)"]) + float(d["System time (seconds)"])
    sectors = int(open(path + ".sectors").read())
    return wall, cpu, int(d["Maximum resident set size (kbytes)"]), sectors, int(d["Exit status"])
a, b = rep(sys.argv[1]), rep(sys.argv[2])
for name, r in (("B: rsync -aHAXc --dry-run", b), ("A: rsend --verify", a)):
    print(f"| {name} | {r[0]:.1f} | {r[1]:.1f} | {r[3] * 512 / 1e9:.2f} | {r[2] / 1024:.1f} MiB | {r[4]} |")
print(f"ratio A/B cold: {a[0] / b[0]:.2f}")
PY
)
fi

# ---------------------------------------------------------------------------
# summary

read -r _ RSS_RSEND_SUM _ _ _ <"$TMP/rss-rsend"
read -r _ RSS_RSYNC_SUM RSS_RSYNC_MAX RSS_RSYNC_N _ <"$TMP/rss-rsync"
ROW=$(python3 - "$J" "$RSS_RSEND_SUM" "$RSS_RSYNC_SUM" "$RSS_RSYNC_MAX" "$RSS_RSYNC_N" "$VERIFY_RC" "$RSYNC_RC" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
rr, ys, ym, yn, vrc, yrc = (int(x) for x in sys.argv[2:])
sec = lambda d: f"{d['median']:.2f} ({d['min']:.2f}-{d['max']:.2f})"
r = s["ratio"]
mib = lambda k: f"{k / 1024:.1f} MiB"
print(f"| {sec(s['kernel'])} | {sec(s['rsend'])} | **{r['median']:.2f}** ({r['min']:.2f}-{r['max']:.2f}) "
      f"| {mib(rr)} | {mib(ys)} ({yn} processes; largest {mib(ym)}) | {vrc} | {yrc} |")
m = lambda k: f"{s[k]['median']:.2f}"
c = s["cpu_ratio"]
print(f"CPU (user + system), median s: rsync {m('kernel_cpu')} (its processes together), rsend {m('rsend_cpu')} "
      f"({m('rsend_user')} user); CPU ratio {c['median']:.2f} ({c['min']:.2f}-{c['max']:.2f})")
print("GOAL " + ("met" if r["median"] <= 0.5 else "MISSED") + f": median ratio {r['median']:.2f} (goal <= 0.50); "
      + ("rsend found the copy identical (exit 0)" if vrc == 0 else f"rsend --verify exit {vrc}: THE COPY DIFFERS or verify is wrong"))
PY
)
{
    echo
    echo "machine: $(machine_line); $("$RSEND" --version); $(rsync --version | head -1 | sed 's/  */ /g'); $(free -g | awk '/^Mem:/ { print $2 " GB RAM" }')"
    echo "load average (1/5/15 min) after the warm timing: $LOAD; busiest other processes:"
    echo "$BUSY"
    echo
    echo "Tree: cp -a of $SRC ($((SRC_KIB / 1024)) MiB allocated, $SRC_ENTRIES entries), read-only snapshot $SNAP;"
    echo "copy on ext4 by rsend | rreceive. Image builds this run: btrfs ${BTRFS_BUILD} s, ext4 copy ${EXT_BUILD} s (0: cached)."
    echo
    echo "Once, untimed:"
    sed 's/^/    /' "$TMP/check.txt"
    echo
    echo "Warm cache: $RUNS alternating pairs after $WARMUP warm-up pairs; seconds, median (min-max); ratio = rsend / rsync per pair; peak RSS from one more run each. Read from disk ($DISK) during the pairs: $WARM_READ_MB MB."
    echo
    echo "| B: \`rsync -aHAXc --dry-run --delete -i\` s | A: \`rsend --verify\` s | ratio A/B | rsend peak RSS | rsync peak RSS (sum) | rsend exit | rsync exit |"
    echo "|---:|---:|---:|---:|---:|---:|---:|"
    echo "$ROW" | sed -n 1p
    echo
    echo "$ROW" | sed -n '2,$p'
    if [[ -n $SPLIT_ROWS ]]; then
        echo
        echo "Phase split, warm, 3 runs each (wall s median (min-max), CPU s median):"
        echo
        echo "| command | wall s | CPU s |"
        echo "|:---|---:|---:|"
        echo "$SPLIT_ROWS"
    fi
    if [[ -n $COLD_ROWS ]]; then
        echo
        echo "Cold cache (sync; echo 3 > /proc/sys/vm/drop_caches before each), one run each:"
        echo
        echo "| | wall s | CPU s | read from disk ($DISK) GB | peak RSS (largest process) | exit |"
        echo "|:---|---:|---:|---:|---:|---:|"
        echo "$COLD_ROWS" | grep '^|'
        echo
        echo "$COLD_ROWS" | grep -v '^|'
    fi
    if [[ -n $PROFILE_TOP ]]; then
        echo
        echo "rsend --verify, one warm run, perf report (self time, dso and symbol, >= 1 %):"
        echo
        echo "$PROFILE_TOP" | sed 's/^/    /'
    fi
} | tee "$TMP/summary.md"
if [[ -n $RESULTS_DIR ]]; then
    mkdir -p "$RESULTS_DIR"
    cp "$J" "$TMP/summary.md" "$TMP/verify.txt" "$TMP/verify.err" "$TMP/verify.json" \
        "$TMP/rsync.txt" "$TMP/rsync.err" "$RESULTS_DIR/"
    for f in "$TMP"/rss-* "$TMP"/time-* "$TMP"/cold-*; do
        [[ -f $f ]] && cp "$f" "$RESULTS_DIR/$(basename "$f").txt"
    done
    [[ -z $PROFILE ]] || cp "$TMP"/perf-report*.txt "$TMP/perf.data" "$RESULTS_DIR/"
fi
(( VERIFY_RC == 0 )) || die "rsend --verify did not find the copy identical (see above)"
