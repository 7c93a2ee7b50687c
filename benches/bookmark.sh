#!/usr/bin/env bash
# Bookmarks (issue #49): what a bookmark costs and what sending from one
# costs, for two data sets:
#   usr   a copy of /usr (cp -a SRC into subvolume vol, read-only snapshot
#         s1), then a change of about 1 % of its files (every 100th regular
#         file in path order, in turn: 64 bytes rewritten in its middle,
#         touched, renamed, deleted; 1 MiB appended to the 4 largest files
#         left; 20 new files), read-only snapshot s2
#   tree  benches/smalltree.py's FILES (100,000) small files in vol,
#         snapshot s1, smalltree.change with FILES/100 files rewritten (plus
#         its 5 deleted, 5 created, 2 directories moved), snapshot s2
# (s1 and s2 are snapshots of the same subvolume, as a nightly job makes.)
#
# For each: the snapshot's data size (bytes of its regular files, each
# inode once) and fs tree size (tree blocks x nodesize, from `btrfs
# inspect-internal dump-tree`, with the inline data in it); the bookmark's
# size (`rsend -d IMG -n --write-bookmark BM s1`) against the data size
# (goal for usr: at most 1 %); the time to write it against a full send
# (`rsend -d IMG -f /dev/null s1`; goal: at most 0.1; with -n the bookmark
# is written alone, no stream measured), with the dry run alone (`rsend -d
# IMG -n s1`, for scale) and with a send that
# writes it too (`rsend -d IMG --write-bookmark BM -f /dev/null s1`, as
# --bookmarks does: the bookmark's own cost); the incremental send
# from the bookmark (`--parent-bookmark BM s2`) against the one from the
# snapshot (`-p s1 s2`), both -f /dev/null (goal: at most 1.2), and whether
# their streams are byte-identical (and `-p BM s2`'s too).
#
# Usage: sudo benches/bookmark.sh            (both data sets)
#        sudo SETS=tree benches/bookmark.sh  (one)
#
# rsend reads the image file, not mounted (the image is mounted once,
# read-only, to count its files). Times are wall-clock medians of rounds
# that run every command of a data set in turn (A B C A B C ...), so the
# incremental pair alternates; warm: after reading the image into the page
# cache and WARMUP untimed rounds; cold (COLD_RUNS > 0): the page cache is
# dropped (sync; drop_caches) before each command.
#
# Environment (all optional):
#   SETS="usr tree" data sets to run
#   SRC=/usr        the tree copied for "usr" (SRC=/usr/share/doc for a quick try)
#   FILES=100000    files of "tree" (10000 for a quick try)
#   RUNS=7          warm rounds
#   WARMUP=1        untimed warm rounds first
#   COLD_RUNS=3     cold rounds (0: none; each drops the page cache of the
#                   whole machine before every command)
#   IMG_DIR=/var/tmp/rsend-bench
#                   where the images are kept between runs, keyed by SRC or
#                   FILES and a hash of the code that makes them, with the
#                   sizes counted once beside them (IMG.stats.json)
#   REBUILD=        1: build the images (and count their sizes) again
#   RESULTS_DIR=    copy the table (bookmark.md), the JSON lines
#                   (bookmark.jsonl: one object per data set and measure)
#                   and the per-run JSON here
#   TMPDIR=/tmp     scratch space (bookmarks, the incremental streams)
#
# Runtime here (2 vCPUs, images cached): a few minutes, most of it the
# /usr copy's full sends (warm and cold); building the /usr copy image
# takes a few minutes the first time, the tree's about one.
set -euo pipefail
BENCH=bookmark.sh
# shellcheck source=benches/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SETS=${SETS:-"usr tree"}
SRC=${SRC:-/usr}
FILES=${FILES:-100000}
RUNS=${RUNS:-7}
WARMUP=${WARMUP:-1}
COLD_RUNS=${COLD_RUNS:-3}
IMG_DIR=${IMG_DIR:-/var/tmp/rsend-bench}
REBUILD=${REBUILD:-}
RESULTS_DIR=${RESULTS_DIR:-}
(( RUNS >= 3 )) || die "RUNS must be at least 3"
(( FILES >= 10000 )) || die "FILES must be at least 10000 (smalltree.change needs 10 directories)"
for s in $SETS; do
    [[ $s == usr || $s == tree ]] || die "unknown data set $s (usr, tree)"
done
for t in btrfs mkfs.btrfs losetup python3 cmp; do
    command -v "$t" >/dev/null || die "$t not found"
done
build_rsend
[[ $("$RSEND" --help) == *--write-bookmark* ]] ||
    die "$RSEND has no --write-bookmark (merge the bookmark feature first)"

scratch_dir rsend-bookmark-bench
mkdir -p "$IMG_DIR" "$TMP/mnt"
JSONL="$TMP/bookmark.jsonl"
: >"$JSONL"

# ---------------------------------------------------------------------------
# the data sets

# The change of the usr data set, run in vol after snapshot s1 (python3
# ROOT); deterministic for a given tree.
read -r -d '' USR_CHANGE <<'PY' || true
import os, random, stat, sys
root = sys.argv[1]
files = []
for d, dirs, names in os.walk(root):
    dirs.sort()
    for n in sorted(names):
        p = os.path.join(d, n)
        st = os.lstat(p)
        if stat.S_ISREG(st.st_mode):
            files.append((p, st.st_size))
rnd = random.Random(49)
done = {"rewritten": 0, "touched": 0, "renamed": 0, "deleted": 0}
changed = set()
for i in range(0, len(files), 100):
    p, size = files[i]
    kind = (i // 100) % 4
    if kind == 0:
        with open(p, "r+b") as f:
            f.seek(size // 2)
            f.write(rnd.randbytes(64))
        done["rewritten"] += 1
    elif kind == 1:
        os.utime(p, (1700000000, 1700000000))
        done["touched"] += 1
    elif kind == 2:
        os.rename(p, p + ".bm-moved")
        done["renamed"] += 1
    else:
        os.unlink(p)
        done["deleted"] += 1
    changed.add(p)
big = sorted((s, p) for p, s in files if p not in changed)[-4:]
for _, p in big:
    with open(p, "ab") as f:
        f.write(rnd.randbytes(1 << 20))
os.mkdir(os.path.join(root, "bm-new"))
for k in range(20):
    with open(os.path.join(root, "bm-new", f"new{k}"), "wb") as f:
        f.write(rnd.randbytes(rnd.randint(1, 20000)))
print(f"{len(files)} regular files; " + ", ".join(f"{v} {k}" for k, v in done.items())
      + f"; 1 MiB appended to {len(big)}; 20 created", file=sys.stderr)
PY

# gen_usr MNT: vol = cp -a SRC, snapshot s1, the change, snapshot s2.
gen_usr() {
    btrfs -q subvolume create "$1/vol"
    cp -a "$SRC/." "$1/vol/"
    sync -f "$1/vol"
    btrfs -q subvolume snapshot -r "$1/vol" "$1/s1"
    python3 -c "$USR_CHANGE" "$1/vol"
    sync -f "$1/vol"
    btrfs -q subvolume snapshot -r "$1/vol" "$1/s2"
}

# gen_tree MNT: vol = smalltree.py's FILES files, snapshot s1, the change
# with FILES/100 files rewritten, snapshot s2.
gen_tree() {
    btrfs -q subvolume create "$1/vol"
    python3 "$REPO/benches/smalltree.py" make "$1/vol" "$FILES"
    sync -f "$1/vol"
    btrfs -q subvolume snapshot -r "$1/vol" "$1/s1"
    python3 "$REPO/benches/smalltree.py" change "$1/vol" "$FILES" $((FILES / 100))
    sync -f "$1/vol"
    btrfs -q subvolume snapshot -r "$1/vol" "$1/s2"
}

# image_of SET: the cached image's path (keyed by the code that makes it).
image_of() {
    local key
    if [[ $1 == usr ]]; then
        key=$({ declare -f gen_usr; echo "$USR_CHANGE"; } | sha256sum | cut -c1-12)
        echo "$IMG_DIR/bookmark-usr$(echo "$SRC" | tr '/' '_')-$key.img"
    else
        key=$({ declare -f gen_tree; cat "$REPO/benches/smalltree.py"; } | sha256sum | cut -c1-12)
        echo "$IMG_DIR/bookmark-tree$FILES-$key.img"
    fi
}

# count_sizes IMG: writes IMG.stats.json (unless there, or REBUILD): per
# snapshot its files and data bytes (mounted read-only), its subvolume id,
# and its fs tree's nodes, leaves, items and inline data (dump-tree).
count_sizes() {
    local img=$1 stats=$1.stats.json s id
    if [[ -f $stats && -z $REBUILD ]]; then
        return
    fi
    log "counting files and tree blocks of $img (once)"
    loop_mount "$img" "$TMP/mnt" ro
    python3 - "$TMP/mnt" >"$TMP/files.json" <<'PY'
import json, os, stat, sys
out = {}
for snap in ("s1", "s2"):
    top = os.path.join(sys.argv[1], snap)
    seen, n = set(), {"files": 0, "data_bytes": 0, "allocated_bytes": 0, "dirs": 0, "symlinks": 0, "other": 0}
    for d, dirs, names in os.walk(top):
        n["dirs"] += 1
        for name in names:
            st = os.lstat(os.path.join(d, name))
            if stat.S_ISREG(st.st_mode):
                if (st.st_ino) in seen:
                    continue
                seen.add(st.st_ino)
                n["files"] += 1
                n["data_bytes"] += st.st_size
                n["allocated_bytes"] += st.st_blocks * 512
            elif stat.S_ISLNK(st.st_mode):
                n["symlinks"] += 1
            else:
                n["other"] += 1
    out[snap] = n
print(json.dumps(out))
PY
    for s in s1 s2; do
        btrfs inspect-internal rootid "$TMP/mnt/$s"
    done >"$TMP/ids"
    loop_umount "$TMP/mnt"
    {
        echo "nodesize $(btrfs inspect-internal dump-super "$img" | awk '$1 == "nodesize" { print $2 }')"
        for s in s1 s2; do
            id=$(sed -n "$([[ $s == s1 ]] && echo 1 || echo 2)p" "$TMP/ids")
            btrfs inspect-internal dump-tree -t "$id" "$img" | awk -v s="$s" -v id="$id" '
                /^node [0-9]+ level/ { nodes++ }
                /^leaf [0-9]+ items/ { leaves++; items += $4 }
                /inline extent data size/ {
                    for (i = 1; i < NF; i++) if ($i == "size") { inl += $(i + 1); ninl++ }
                }
                END { printf "%s %d %d %d %d %d %d\n", s, id, nodes, leaves, items, inl, ninl }'
        done
    } >"$TMP/tree.txt"
    python3 - "$TMP/files.json" "$TMP/tree.txt" >"$stats.tmp" <<'PY'
import json, sys
out = json.load(open(sys.argv[1]))
lines = [l.split() for l in open(sys.argv[2])]
nodesize = int(lines[0][1])
for s, id_, nodes, leaves, items, inl, ninl in lines[1:]:
    nodes, leaves = int(nodes), int(leaves)
    out[s].update(subvol_id=int(id_), tree_nodes=nodes, tree_leaves=leaves, tree_items=int(items),
                  tree_bytes=(nodes + leaves) * nodesize, inline_bytes=int(inl), inline_extents=int(ninl))
out["nodesize"] = nodesize
print(json.dumps(out, indent=1))
PY
    mv "$stats.tmp" "$stats"
}

# ---------------------------------------------------------------------------
# timing

# rounds OUT.json DROP RUNS WARMUP NAME1 CMD1 NAME2 CMD2 ...: WARMUP untimed
# rounds, then RUNS timed rounds of every command in turn, standard output
# to /dev/null; with DROP=1 the page cache is dropped before each command.
# Wall time from perf_counter, CPU time and peak RSS from wait4; writes per
# NAME the runs and their median/min/max. Commands split with shlex.
rounds() {
    python3 - "$@" <<'PY'
import json, os, shlex, statistics, sys, time
out, drop, runs, warmup = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), int(sys.argv[4])
args = sys.argv[5:]
cmds = [(args[i], shlex.split(args[i + 1])) for i in range(0, len(args), 2)]
null = os.open("/dev/null", os.O_WRONLY)
res = {name: [] for name, _ in cmds}
for r in range(warmup + runs):
    for name, argv in cmds:
        if drop:
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
        t = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os.dup2(null, 1)
            os.execvp(argv[0], argv)
        _, st, ru = os.wait4(pid, 0)
        wall = time.perf_counter() - t
        if os.waitstatus_to_exitcode(st) != 0:
            sys.exit(f"{argv} failed: exit {os.waitstatus_to_exitcode(st)}")
        if r >= warmup:
            res[name].append({"wall": wall, "user": ru.ru_utime, "sys": ru.ru_stime, "maxrss_kib": ru.ru_maxrss})
def stats(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}
summary = {}
for name, rs in res.items():
    summary[name] = {"wall": stats([x["wall"] for x in rs]), "cpu": stats([x["user"] + x["sys"] for x in rs]),
                     "maxrss_kib": max(x["maxrss_kib"] for x in rs), "runs": rs}
json.dump(summary, open(out, "w"), indent=1)
PY
}

# ---------------------------------------------------------------------------
# one data set

# measure SET: builds or finds its image, counts it, writes the bookmark
# once (checked), compares the incremental streams, times everything;
# appends its JSON lines to JSONL.
measure() {
    local set=$1 img bm j_warm j_cold=
    img=$(image_of "$set")
    log "data set $set: $img"
    if [[ $set == usr ]]; then
        local mib=0
        [[ -f $img && -z $REBUILD ]] || mib=$(du -sxm "$SRC" | cut -f1)
        build_cached_image "$img" "$((mib * 2 + 1024))M" "$TMP/mnt" gen_usr
    else
        build_cached_image "$img" "$((FILES * 24 / 1024 + 2048))M" "$TMP/mnt" gen_tree
    fi
    local built=$BUILD_SECONDS
    count_sizes "$img"
    bm="$TMP/$set-s1.bookmark"

    log "$set: once: the dry run, the bookmark, the three incremental streams"
    "$RSEND" -q -d "$img" -n s1 >"$TMP/$set-dry.txt"
    "$RSEND" -q -d "$img" -n --write-bookmark "$bm" s1 >"$TMP/$set-dry-bm.txt"
    [[ -s $bm ]] || die "$set: no bookmark written at $bm"
    "$RSEND" -q -d "$img" --write-bookmark "$bm.send" -f /dev/null s1
    # rsend's own account (-v): the dry run's time, the bookmark's blocks,
    # bytes and time to write; the incremental send's time from the bookmark.
    "$RSEND" -v -d "$img" -n --write-bookmark "$bm.v" s1 2>&1 >/dev/null |
        grep -E '^s1 .* in [0-9.]+[mµn]?s$|^rsend: bookmark of' >"$TMP/$set-v.txt" || true
    "$RSEND" -v -d "$img" -p s1 -f /dev/null s2 2>&1 | grep -E '^s2 .* in [0-9.]+[mµn]?s$' |
        sed 's/^/-p s1: /' >>"$TMP/$set-v.txt" || true
    "$RSEND" -v -d "$img" --parent-bookmark "$bm" -f /dev/null s2 2>&1 |
        grep -E '^s2 .* in [0-9.]+[mµn]?s$|^rsend: parent' | sed 's/^s2/--parent-bookmark: s2/' >>"$TMP/$set-v.txt" || true
    local same_send=identical
    cmp -s "$bm" "$bm.send" || same_send=DIFFERENT
    cmp -s "$TMP/$set-dry.txt" "$TMP/$set-dry-bm.txt" ||
        log "$set: NOTE: -n's output differs with --write-bookmark"
    "$RSEND" -q -d "$img" -p s1 -f "$TMP/$set-inc-snap.stream" s2
    "$RSEND" -q -d "$img" --parent-bookmark "$bm" -f "$TMP/$set-inc-bm.stream" s2
    "$RSEND" -q -d "$img" -p "$bm" -f "$TMP/$set-inc-pbm.stream" s2
    local same_bm=identical same_pbm=identical
    cmp -s "$TMP/$set-inc-snap.stream" "$TMP/$set-inc-bm.stream" || same_bm=DIFFERENT
    cmp -s "$TMP/$set-inc-snap.stream" "$TMP/$set-inc-pbm.stream" || same_pbm=DIFFERENT
    if [[ $same_bm != identical ]]; then
        log "$set: the streams of -p s1 and --parent-bookmark differ: $(cmp "$TMP/$set-inc-snap.stream" "$TMP/$set-inc-bm.stream" 2>&1 | head -1)"
        btrfs receive --dump -f "$TMP/$set-inc-snap.stream" >"$TMP/$set-inc-snap.dump" 2>&1 || true
        btrfs receive --dump -f "$TMP/$set-inc-bm.stream" >"$TMP/$set-inc-bm.dump" 2>&1 || true
        diff "$TMP/$set-inc-snap.dump" "$TMP/$set-inc-bm.dump" | head -40 >"$TMP/$set-inc.diff" || true
        sed 's/^/   /' "$TMP/$set-inc.diff" >&2
    fi

    local full="'$RSEND' -q -d '$img' -f /dev/null s1"
    local write="'$RSEND' -q -d '$img' -n --write-bookmark '$bm' s1"
    local sendbm="'$RSEND' -q -d '$img' --write-bookmark '$bm' -f /dev/null s1"
    local dry="'$RSEND' -q -d '$img' -n s1"
    local incs="'$RSEND' -q -d '$img' -p s1 -f /dev/null s2"
    local incb="'$RSEND' -q -d '$img' --parent-bookmark '$bm' -f /dev/null s2"
    if (( COLD_RUNS > 0 )); then
        log "$set: $COLD_RUNS cold rounds (page cache dropped before each command)"
        j_cold="$TMP/$set-cold.json"
        rounds "$j_cold" 1 "$COLD_RUNS" 0 full "$full" send_bm "$sendbm" write "$write" dry "$dry" inc_snap "$incs" inc_bm "$incb"
    fi
    log "$set: reading the image into the page cache; $WARMUP + $RUNS warm rounds"
    warm_cache "$img"
    j_warm="$TMP/$set-warm.json"
    rounds "$j_warm" 0 "$RUNS" "$WARMUP" full "$full" send_bm "$sendbm" write "$write" dry "$dry" inc_snap "$incs" inc_bm "$incb"

    python3 - "$set" "$img.stats.json" "$bm" "$TMP/$set-dry.txt" "$j_warm" "$j_cold" \
        "$TMP/$set-inc-snap.stream" "$same_bm" "$same_pbm" "$same_send" "$TMP/$set-v.txt" "$built" "$SRC" "$FILES" >>"$JSONL" <<'PY'
import json, os, statistics, sys
(set_, stats_f, bm, dry_f, j_warm, j_cold, inc_f, same_bm, same_pbm, same_send, v_f, built, src, files) = sys.argv[1:]
st = json.load(open(stats_f))
s1, s2 = st["s1"], st["s2"]
bm_bytes = os.path.getsize(bm)
dry = open(dry_f).read().split("\n")[0].split("\t")
base = {"bench": "bookmark", "set": set_,
        "what": f"cp -a {src}" if set_ == "usr" else f"{int(files):,} small files (benches/smalltree.py)"}
def ratio(js, a, b):
    ra, rb = js[a]["runs"], js[b]["runs"]
    xs = [y["wall"] / x["wall"] for x, y in zip(ra, rb)]
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}
change = ("every 100th regular file rewritten (64 bytes), touched, renamed or deleted in turn; "
          "1 MiB appended to 4 large files; 20 created") if set_ == "usr" else \
         (f"{int(files) // 100:,} files rewritten, 5 deleted, 5 created, 2 directories moved")
pct = 100 * bm_bytes / s1["data_bytes"]
print(json.dumps(dict(base, measure="size", files=s1["files"], data_bytes=s1["data_bytes"],
                      allocated_bytes=s1["allocated_bytes"], dirs=s1["dirs"], symlinks=s1["symlinks"],
                      tree_bytes=s1["tree_bytes"], tree_nodes=s1["tree_nodes"], tree_leaves=s1["tree_leaves"],
                      tree_items=s1["tree_items"], inline_bytes=s1["inline_bytes"], nodesize=st["nodesize"],
                      stream_bytes=int(dry[1].split()[0]) if len(dry) > 1 and dry[1].split()[0].isdigit() else None,
                      dry_run_line=dry, bookmark_bytes=bm_bytes, bookmark_of_send=same_send, bookmark_pct_of_data=pct,
                      bookmark_pct_of_tree=100 * bm_bytes / s1["tree_bytes"],
                      bookmark_bytes_per_file=bm_bytes / max(1, s1["files"]),
                      goal_pct=1.0 if set_ == "usr" else None,
                      met=(pct <= 1.0) if set_ == "usr" else None, image_build_seconds=float(built),
                      rsend_v=open(v_f).read().splitlines())))
for cache, jf in (("warm", j_warm), ("cold", j_cold)):
    if not jf:
        continue
    js = json.load(open(jf))
    w = lambda k: {x: js[k][x] for x in ("wall", "cpu", "maxrss_kib")}
    r = ratio(js, "full", "write")
    print(json.dumps(dict(base, measure="write", cache=cache, runs=len(js["full"]["runs"]),
                          full_send=w("full"), write_bookmark=w("write"), dry_run=w("dry"),
                          send_and_bookmark=w("send_bm"), ratio=r, ratio_dry=ratio(js, "full", "dry"),
                          ratio_send_and_bookmark=ratio(js, "full", "send_bm"), goal=0.1, met=r["median"] <= 0.1)))
    r = ratio(js, "inc_snap", "inc_bm")
    print(json.dumps(dict(base, measure="incremental", cache=cache, runs=len(js["inc_snap"]["runs"]),
                          change=change, from_snapshot=w("inc_snap"),
                          from_bookmark=w("inc_bm"), ratio=r, goal=1.2, met=r["median"] <= 1.2,
                          stream_bytes=os.path.getsize(inc_f), streams_parent_bookmark=same_bm,
                          streams_p_bookmark=same_pbm)))
PY
}

for s in $SETS; do
    measure "$s"
done
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------------------
# summary

python3 - "$JSONL" >"$TMP/table.md" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
def b(n):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:,.1f} {unit}"
    return f"{n} B"
def t(d):
    m = d["wall"]["median"]
    f = (lambda x: f"{x:.2f} s") if m >= 1 else (lambda x: f"{x * 1000:.0f} ms")
    return f"{f(m)} ({f(d['wall']['min'])}-{f(d['wall']['max'])})"
def r(d):
    return f"{d['median']:.3f} ({d['min']:.3f}-{d['max']:.3f})"
goal = lambda x: "" if x is None else (" **met**" if x else " **missed**")
print("Sizes (snapshot s1; data: bytes of its regular files, each inode once; fs tree: its tree blocks x nodesize,"
      " from `btrfs inspect-internal dump-tree`):\n")
print("| data set | files | data | fs tree (inline data in it) | bookmark | bookmark / data | bookmark / fs tree | bytes per file "
      "| -n's bookmark and a send's |")
print("|:---|---:|---:|---:|---:|---:|---:|---:|:---|")
for x in recs:
    if x["measure"] == "size":
        g = "" if x["goal_pct"] is None else f" (goal <= {x['goal_pct']:g} %:{goal(x['met'])})"
        print(f"| {x['what']} | {x['files']:,} | {b(x['data_bytes'])} | {b(x['tree_bytes'])} ({b(x['inline_bytes'])}) "
              f"| {b(x['bookmark_bytes'])} | {x['bookmark_pct_of_data']:.3f} %{g} | {x['bookmark_pct_of_tree']:.1f} % "
              f"| {x['bookmark_bytes_per_file']:.0f} | {x['bookmark_of_send']} |")
print("\nWriting the bookmark (`rsend -n --write-bookmark BM s1`) against the full send (`rsend -f /dev/null s1`);"
      " the dry run alone (`rsend -n s1`) is the part -n costs anyway; a send that also writes the bookmark"
      " (`rsend --write-bookmark BM -f /dev/null s1`, as --bookmarks does) against the same send without."
      " Wall time, median (min-max) of the rounds; ratio per round:\n")
print("| data set | page cache | rounds | full send | -n --write-bookmark | -n alone | bookmark / full send (goal <= 0.1) "
      "| -n alone / full send | send with --write-bookmark | that / full send |")
print("|:---|:---|---:|---:|---:|---:|---:|---:|---:|---:|")
for x in recs:
    if x["measure"] == "write":
        print(f"| {x['what']} | {x['cache']} | {x['runs']} | {t(x['full_send'])} | {t(x['write_bookmark'])} | {t(x['dry_run'])} "
              f"| {r(x['ratio'])}{goal(x['met'])} | {r(x['ratio_dry'])} | {t(x['send_and_bookmark'])} "
              f"| {r(x['ratio_send_and_bookmark'])} |")
print("\nIncremental send s1 -> s2, both `-f /dev/null`, alternating; ratio per round:\n")
print("| data set | page cache | rounds | `-p s1 s2` | `--parent-bookmark s1.bm s2` | ratio (goal <= 1.2) | stream | same bytes (`--parent-bookmark`, `-p BM`) |")
print("|:---|:---|---:|---:|---:|---:|---:|:---|")
for x in recs:
    if x["measure"] == "incremental":
        print(f"| {x['what']} | {x['cache']} | {x['runs']} | {t(x['from_snapshot'])} | {t(x['from_bookmark'])} "
              f"| {r(x['ratio'])}{goal(x['met'])} | {b(x['stream_bytes'])} | {x['streams_parent_bookmark']}, {x['streams_p_bookmark']} |")
print("\nrsend -v, once (warm):\n")
for x in recs:
    if x["measure"] == "size":
        for l in x["rsend_v"]:
            print(f"    {x['set']}: {l}")
print("\nPeak RSS (warm, largest of the rounds): " + "; ".join(
    f"{x['set']}: full send {x['full_send']['maxrss_kib'] / 1024:.0f} MiB, bookmark {x['write_bookmark']['maxrss_kib'] / 1024:.0f} MiB, "
    f"dry run {x['dry_run']['maxrss_kib'] / 1024:.0f} MiB" for x in recs if x["measure"] == "write" and x["cache"] == "warm"))
PY
{
    echo
    echo "machine: $(machine_line); $("$RSEND" --version) at $(git -C "$REPO" rev-parse --short HEAD)"
    echo "load average (1/5/15 min) after the timing: $LOAD"
    echo
    cat "$TMP/table.md"
    echo
    echo "JSON lines ($JSONL):"
    cat "$JSONL"
} | tee "$TMP/bookmark.md"
if [[ -n $RESULTS_DIR ]]; then
    mkdir -p "$RESULTS_DIR"
    cp "$TMP/bookmark.md" "$JSONL" "$TMP"/*-warm.json "$RESULTS_DIR/"
    cp "$TMP"/*-cold.json "$RESULTS_DIR/" 2>/dev/null || true
fi
