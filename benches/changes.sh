#!/bin/bash
# Benchmark `rsend --changes` (what changed between two snapshots, read from
# the image file, no kernel) against what snapper and stream-diff scripts do
# with the kernel: `btrfs send --no-data -p s0 s1 | btrfs receive --dump` on
# the mounted filesystem. 100,000 small files, 100 of them rewritten, 5
# deleted, 5 created, 2 directories moved (benches/incremental.sh's tree and
# change). Warm cache, both to /dev/null.
#
# Usage: sudo benches/changes.sh
#
# Goals: rsend --changes in at most 0.5 x the time of the kernel pipeline;
# peak RSS of both reported (no goal). Before timing, once: rsend's listing
# must name exactly the 100 rewritten files, the 5 deleted, the 5 created
# and the 2 moved directories (plus the directories whose mtime the change
# moved, counted apart); a mismatch is printed and makes the script exit 1
# after the timing.
#
# Environment (all optional):
#   FILES=100000   files in the tree (benches/smalltree.py; 10000 for a
#                  quick try)
#   RUNS=31        timed pairs (kernel pipeline, rsend, kernel, rsend, ...)
#   WARMUP=2       untimed pairs first
#   IMG_DIR=/var/tmp/rsend-bench-incremental
#                  where the image is kept between runs (shared with
#                  benches/incremental.sh: the same tree, the same key)
#   REBUILD=       1: build the image again even when cached
#   PROFILE=       1: also `perf record -g` PROFILE_RUNS (40) runs of
#                  rsend --changes and print where its CPU time goes
#                  (benches/perf_breakdown.py)
#   SPLIT=1        0: skip the phase split: after the pairs, 21 rounds of
#                  rsend --list (opening the image), rsend --changes -p s0 s0
#                  (opening plus comparing two equal roots), A, A with glibc's
#                  heap on huge pages (GLIBC_TUNABLES, no code change), rsend's
#                  incremental send -p s0 s1, btrfs send --no-data alone and
#                  B, interleaved; medians of wall and CPU time, minor faults
#   RESULTS_DIR=   copy the per-run JSON, listings, RSS reports and the
#                  table here
#   TMPDIR=/tmp    scratch space (mount point, listings; small)
#
# Runtime here (2 vCPUs): about 10 s with the image cached; building it
# adds about 5 s for 100k files; PROFILE=1 adds about 5 s.
#
# What is timed: the image is attached read-only (losetup -r) and mounted
# -o ro; A = `rsend -q -d IMG --changes -p s0 s1` reads the image FILE
# while it is mounted (as benches/incremental.sh does: both tools share the
# image's page cache; rsend would read the loop DEVICE of a mounted
# filesystem with O_DIRECT, uncached, which is not the case measured here),
# B = `btrfs send -q --no-data -p MNT/s0 MNT/s1 | btrfs receive --dump`,
# run by a small bash script (the shell is part of B; its cost alone is
# measured and printed; the script also tolerates and counts a btrfs-progs
# race: receive --dump exits at END and btrfs send can die of SIGPIPE after
# everything was sent, see KERNEL_SH below). time_pairs (common.sh) runs them alternately, wall and CPU
# time and peak RSS from wait4 (for B the largest of its processes); ratio
# = rsend / kernel pipeline per pair. /usr/bin/time -v then gives the peak
# RSS of rsend and of each side of the pipeline.
set -euo pipefail
BENCH=changes.sh
# shellcheck source=benches/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

FILES=${FILES:-100000}
RUNS=${RUNS:-31}
WARMUP=${WARMUP:-2}
IMG_DIR=${IMG_DIR:-/var/tmp/rsend-bench-incremental}
REBUILD=${REBUILD:-}
PROFILE=${PROFILE:-}
PROFILE_RUNS=${PROFILE_RUNS:-40}
SPLIT=${SPLIT:-1}
PERF_FREQ=4000
RESULTS_DIR=${RESULTS_DIR:-}
(( RUNS >= 3 )) || die "RUNS must be at least 3"
(( FILES >= 10000 )) || die "FILES must be at least 10000 (the change needs 10 directories)"

need_pkg /usr/bin/time time
[[ -z $PROFILE ]] || need_pkg perf linux-perf
for t in btrfs mkfs.btrfs losetup python3 bash; do
    command -v "$t" >/dev/null || die "$t not found"
done
build_rsend

scratch_dir rsend-changes-bench
MNT="$TMP/mnt"
mkdir "$MNT"
scratch_mount "$MNT"

# B as a script: `btrfs receive --dump` exits when it has read the stream's
# END, without waiting for end of file; btrfs send's splice thread can then
# still be waiting for the kernel to close its pipe, and its next splice()
# meets a pipe without reader: SIGPIPE (exit 141) or, where SIGPIPE is
# ignored (under python, as in time_pairs), "ERROR: failed to read stream
# from kernel: Broken pipe" and exit 1, although everything was sent and
# dumped. That is counted (a line in $3 each time), not a failure.
KERNEL_SH="$TMP/kernel-changes.sh"
cat >"$KERNEL_SH" <<'SH'
#!/bin/bash
# kernel-changes.sh S0 S1 LOG; no process but the two (an empty stderr file
# per run, LOG.err, is all it adds)
btrfs send -q --no-data -p "$1" "$2" 2>"$3.err" | btrfs receive --dump
s=("${PIPESTATUS[@]}")
if [[ ${s[0]} != 0 ]]; then
    e=
    read -r -d '' e <"$3.err" || true
    if [[ ${s[1]} == 0 && ( ${s[0]} == 141 || $e == *"Broken pipe"* ) ]]; then
        echo "${s[0]}" >>"$3"
        s[0]=0
    else
        echo "$e" >&2
    fi
fi
[[ ${s[0]} == 0 && ${s[1]} == 0 ]]
SH
SIGPIPES="$TMP/sigpipes"

smalltree_image "$FILES" "$MNT"
IMG=$(smalltree_image_path "$FILES")

log "attaching $IMG read-only, mounting -o ro for btrfs send"
scratch_image "$IMG"
LOOP=$(losetup -r --find --show "$IMG")
mount -o ro "$LOOP" "$MNT"
[[ -d $MNT/s0 && -d $MNT/s1 ]] || die "the image has no s0 and s1"
warm_cache "$IMG"

# ---------------------------------------------------------------------------
# sanity, once: rsend's listing against the change benches/smalltree.py makes

log "listing once: rsend --changes (text and --json), btrfs send --no-data | btrfs receive --dump"
"$RSEND" -q -d "$IMG" --changes -p s0 s1 >"$TMP/changes.txt"
"$RSEND" -q -d "$IMG" --changes -p s0 s1 --json >"$TMP/changes.json"
bash "$KERNEL_SH" "$MNT/s0" "$MNT/s1" "$TMP/sigpipes-untimed" >"$TMP/dump.txt"
SANITY=ok
python3 - "$REPO/benches" "$FILES" "$TMP/changes.txt" "$TMP/changes.json" "$TMP/dump.txt" \
    >"$TMP/sanity.txt" <<'PY' || SANITY=MISMATCH
import collections, json, sys
sys.path.insert(0, sys.argv[1])
import smalltree  # PER; the change below follows smalltree.change
n, per = int(sys.argv[2]), smalltree.PER
ndirs = (n + per - 1) // per
moves = {"d0003": f"d{ndirs - 1:04d}/moved-d0003", "d0005": "d0001/moved-d0005"}

def path(i):
    d, f = divmod(i, per)
    return f"d{d:04d}/f{f:04d}"

def in_s1(p):  # where an s0 path is in s1
    top, _, rest = p.partition("/")
    return moves.get(top, top) + ("/" + rest if rest else "")

want = {
    "data": {in_s1(path(k * n // 100 + 7)) for k in range(100)},
    "deleted": {path(k * n // 5 + 500) for k in range(5)},
    "created": {path(k * n // 5 + 500).rsplit("/", 1)[0] + f"/new{k}" for k in range(5)},
    "renamed": {(a, b) for a, b in moves.items()},
}
# directories whose entries the change added or removed (their mtime moves)
dirs = {p.rsplit("/", 1)[0] for p in want["deleted"]} | {"d0001", f"d{ndirs - 1:04d}", ""}

text = open(sys.argv[3], "rb").read().decode("utf-8", "replace").splitlines()
recs = [json.loads(l) for l in open(sys.argv[4])]
got = collections.defaultdict(set)
other = []
kinds = collections.Counter()
for line in text:
    f = line.split("\t")
    kinds[f[0]] += 1
    if f[0] == "M" and "data" in f[2].split(","):
        got["data"].add(f[1])
    elif f[0] == "-":
        got["deleted"].add(f[1])
    elif f[0] == "+":
        got["created"].add(f[1])
    elif f[0] == "R":
        got["renamed"].add((f[1], f[2]))
    elif f[0] == "M" and f[2] == "mtime" and f[1].strip("/.") in dirs:
        got["dir mtime"].add(f[1])
    else:
        other.append(line)
ok = len(recs) == len(text)
print(f"rsend --changes: {len(text)} lines ({', '.join(f'{v} {k}' for k, v in sorted(kinds.items()))}); "
      f"--json: {len(recs)} records{'' if ok else ' (NOT the same number)'}")
for k in ("data", "deleted", "created", "renamed"):
    g, w = got[k], want[k]
    good = g == w
    ok &= good
    print(f"  {k}: {len(g)} listed, {len(w)} expected, {'exactly those' if good else 'MISMATCH'}")
    if not good:
        print(f"    missing: {sorted(w - g)[:10]}\n    not expected: {sorted(g - w)[:10]}")
print(f"  directories with only their mtime changed: {len(got['dir mtime'])} "
      f"({', '.join(sorted(repr(d) for d in got['dir mtime']))})")
if other:
    ok = False
    print(f"  OTHER lines ({len(other)}), not expected:")
    for l in other[:20]:
        print("    " + l)
dump = collections.Counter(l.split()[0] for l in open(sys.argv[5], errors="replace") if l.strip())
print(f"btrfs receive --dump: {sum(dump.values())} lines ({', '.join(f'{v} {k}' for k, v in sorted(dump.items()))})")
sys.exit(0 if ok else 1)
PY
cat "$TMP/sanity.txt" >&2
[[ $SANITY == ok ]] || echo "$BENCH: WARNING: rsend's listing is not the change made (see above)" >&2

# ---------------------------------------------------------------------------
# timing

log "shell cost alone (bash -c with an empty pipeline), 31 runs"
SHELL_MS=$(python3 - <<'PY'
import statistics, subprocess, time
ts = []
for _ in range(31):
    t = time.perf_counter()
    subprocess.run(["bash", "-c", "true | true; s=(${PIPESTATUS[@]}); [[ ${s[1]} == 0 ]]"], check=True)
    ts.append(time.perf_counter() - t)
print(f"{statistics.median(ts) * 1000:.1f}")
PY
)

KERNEL_CMD="bash '$KERNEL_SH' '$MNT/s0' '$MNT/s1' '$SIGPIPES'"
RSEND_CMD="'$RSEND' -q -d '$IMG' --changes -p s0 s1"
log "$WARMUP + $RUNS alternating pairs: B = $KERNEL_CMD, A = $RSEND_CMD"
J="$TMP/changes-$FILES.json"
time_pairs "$RUNS" "$WARMUP" "$J" kernel "$KERNEL_CMD" rsend "$RSEND_CMD"
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
BUSY=$(ps -eo pcpu,comm --sort=-pcpu | sed -n 2,4p)
NSIGPIPE=0
[[ ! -f $SIGPIPES ]] || NSIGPIPE=$(wc -l <"$SIGPIPES")

log "peak RSS (/usr/bin/time -v): rsend, btrfs send, btrfs receive --dump"
/usr/bin/time -v -o "$TMP/rss-rsend" "$RSEND" -q -d "$IMG" --changes -p s0 s1 >/dev/null
/usr/bin/time -v -o "$TMP/rss-send" btrfs send -q --no-data -p "$MNT/s0" "$MNT/s1" |
    /usr/bin/time -v -o "$TMP/rss-dump" btrfs receive --dump >/dev/null || true # the SIGPIPE above
[[ -s $TMP/rss-send && -s $TMP/rss-dump ]] || die "no RSS report from the kernel pipeline"
RSS_RSEND=$(maxrss "$TMP/rss-rsend")
RSS_SEND=$(maxrss "$TMP/rss-send")
RSS_DUMP=$(maxrss "$TMP/rss-dump")

SPLIT_ROWS=
if [[ $SPLIT == 1 ]]; then
    log "phase split: 21 interleaved rounds of 7 commands"
    SPLIT_ROWS=$(python3 - 21 \
        "rsend --list (open the image, read the root tree)" "'$RSEND' -q -d '$IMG' --list" \
        "rsend --changes -p s0 s0 (open, compare two equal roots)" "'$RSEND' -q -d '$IMG' --changes -p s0 s0" \
        "A: rsend --changes -p s0 s1" "$RSEND_CMD" \
        "A with GLIBC_TUNABLES=glibc.malloc.hugetlb=1:glibc.malloc.top_pad=67108864" \
        "env GLIBC_TUNABLES=glibc.malloc.hugetlb=1:glibc.malloc.top_pad=67108864 $RSEND_CMD" \
        "rsend -p s0 s1 -f /dev/null (its incremental send, with data)" "'$RSEND' -q -d '$IMG' -p s0 -f /dev/null s1" \
        "btrfs send --no-data -p alone (-f /dev/null)" "btrfs send -q --no-data -p '$MNT/s0' -f /dev/null '$MNT/s1'" \
        "B: btrfs send --no-data -p \\| btrfs receive --dump" "$KERNEL_CMD" <<'PY'
import os, shlex, statistics, sys, time
rounds, args = int(sys.argv[1]), sys.argv[2:]
cmds = [(args[i], shlex.split(args[i + 1])) for i in range(0, len(args), 2)]
null = os.open("/dev/null", os.O_WRONLY)
res = [[] for _ in cmds]
for r in range(rounds + 1):
    for j, (_, argv) in enumerate(cmds):
        t = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os.dup2(null, 1)
            os.execvp(argv[0], argv)
        _, st, ru = os.wait4(pid, 0)
        w = time.perf_counter() - t
        if os.waitstatus_to_exitcode(st) != 0:
            sys.exit(f"{argv} failed: {st}")
        if r:
            res[j].append((w, ru.ru_utime + ru.ru_stime, ru.ru_minflt))
for (name, _), r in zip(cmds, res):
    med = lambda k: statistics.median(x[k] for x in r)
    print(f"| {name} | {med(0) * 1000:.1f} | {med(1) * 1000:.1f} | {med(2):,.0f} |")
PY
)
fi

PROFILE_TABLE=
if [[ -n $PROFILE ]]; then
    log "perf record -g (dwarf call graphs) over $PROFILE_RUNS runs of rsend --changes"
    perf record -q -g --call-graph dwarf,32768 -F "$PERF_FREQ" -o "$TMP/perf.data" -- \
        sh -c "for i in \$(seq $PROFILE_RUNS); do '$RSEND' -q -d '$IMG' --changes -p s0 s1 >/dev/null; done" 2>/dev/null
    perf script -i "$TMP/perf.data" -F comm,tid,ip,sym 2>/dev/null >"$TMP/perf.script"
    perf report -i "$TMP/perf.data" --stdio --children --sort symbol -g none --percent-limit 1 \
        2>/dev/null >"$TMP/perf-report.txt" || true
    PROFILE_TABLE=$(python3 "$REPO/benches/perf_breakdown.py" "$PROFILE_RUNS" "$PERF_FREQ" "changes=$TMP/perf.script")
fi

# ---------------------------------------------------------------------------
# summary

ROW=$(python3 - "$J" "$FILES" "$RSS_RSEND" "$RSS_SEND" "$RSS_DUMP" "$(wc -l <"$TMP/changes.txt")" \
    "$(wc -l <"$TMP/dump.txt")" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
n, rr, rs, rd, lr, ld = (int(x) for x in sys.argv[2:])
ms = lambda d: f"{d['median'] * 1000:.1f} ({d['min'] * 1000:.1f}-{d['max'] * 1000:.1f})"
r = s["ratio"]
mib = lambda k: f"{k / 1024:.1f} MiB"
print(f"| {n:,} | {ms(s['kernel'])} | {ms(s['rsend'])} | **{r['median']:.2f}** ({r['min']:.2f}-{r['max']:.2f}) "
      f"| {mib(rr)} | {mib(rs)} + {mib(rd)} | {lr:,} | {ld:,} |")
m = lambda k: f"{s[k]['median'] * 1000:.1f}"
c = s["cpu_ratio"]
print(f"CPU, median ms: kernel pipeline {m('kernel_cpu')} ({m('kernel_sys')} sys), rsend {m('rsend_cpu')} "
      f"({m('rsend_user')} user); CPU ratio {c['median']:.2f} ({c['min']:.2f}-{c['max']:.2f}); "
      f"largest rsend RSS over the timed runs {s['rsend_maxrss_kib'] / 1024:.1f} MiB")
print("GOAL " + ("met" if r["median"] <= 0.5 else "MISSED") + f": median ratio {r['median']:.2f} (goal <= 0.50)")
PY
)
{
    echo
    echo "machine: $(machine_line); $("$RSEND" --version)"
    echo "load average (1/5/15 min) after the timing: $LOAD; busiest other processes:"
    echo "$BUSY"
    echo
    echo "Change s0 -> s1: 100 files rewritten, 5 deleted, 5 created, 2 directories (1000 files each) moved."
    echo "Sanity (rsend's listing against the change): $SANITY"
    sed 's/^/    /' "$TMP/sanity.txt"
    echo
    echo "$RUNS alternating pairs after $WARMUP warm-up pairs, warm cache; times in ms, median (min-max); ratio = rsend / kernel pipeline per pair."
    echo "B includes starting bash: $SHELL_MS ms alone (median of 31). btrfs send failed with EPIPE (SIGPIPE is ignored under python) after receive --dump had read END in $NSIGPIPE of B's $((RUNS + WARMUP)) runs (a btrfs-progs race; not counted as failures)."
    echo
    echo "| files | B: \`btrfs send --no-data -p \| btrfs receive --dump\` ms | A: \`rsend --changes -p\` ms | ratio A/B | rsend peak RSS | btrfs send + receive --dump peak RSS | rsend lines | dump lines |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
    echo "$ROW" | sed -n 1p
    echo
    echo "$ROW" | sed -n '2,$p'
    if [[ -n $SPLIT_ROWS ]]; then
        echo
        echo "Phase split, warm, 21 interleaved rounds, medians (B's CPU and faults: all its processes):"
        echo
        echo "| command | wall ms | CPU ms | minor faults |"
        echo "|:---|---:|---:|---:|"
        echo "$SPLIT_ROWS"
    fi
    if [[ -n $PROFILE_TABLE ]]; then
        echo
        echo "Where rsend --changes' CPU time goes (perf, $PROFILE_RUNS runs, benches/perf_breakdown.py):"
        echo
        echo "$PROFILE_TABLE"
    fi
} | tee "$TMP/summary.md"
if [[ -n $RESULTS_DIR ]]; then
    mkdir -p "$RESULTS_DIR"
    cp "$J" "$TMP/summary.md" "$TMP/changes.txt" "$TMP/changes.json" "$TMP/dump.txt" "$RESULTS_DIR/"
    for f in rsend send dump; do cp "$TMP/rss-$f" "$RESULTS_DIR/rss-$f.txt"; done
    [[ -z $PROFILE ]] || cp "$TMP/perf-report.txt" "$TMP/perf.data" "$RESULTS_DIR/"
fi
[[ $SANITY == ok ]] || die "rsend --changes did not list the change made (see Sanity above)"
