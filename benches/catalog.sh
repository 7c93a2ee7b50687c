#!/usr/bin/env bash
# The catalog (issue #50): what it costs per night and what a restore from
# it reads, against replaying the chain.
#
# Data: a btrfs image (cached) with subvolume vol = cp -a SRC (/usr here,
# 5.1 GB) as night 1, then 9 nights that each change about 1 % of its
# regular files (in turn: 64 bytes rewritten in the middle, bytes appended,
# touched, chmod, renamed, deleted; plus new files, 8 x 4 KiB written into
# each of the 3 largest files, a directory renamed in night 6), and one
# 1 MiB file (catbench/one-mib.bin) created in night 2 and changed in 4
# small writes (16 B-4 KiB) every later night; read-only snapshots n01..n10
# of vol, and n11 with no change after n10. rsend (release) sends n01 in
# full and n02..n11 each against the night before, to stream files.
#
# Measured, in one run:
# - cataloging each night (`rreceive --catalog DB -f nNN.stream`, the
#   stream file evicted from the page cache first): time, the catalog's
#   growth (used pages: (page_count - freelist_count) x page_size), its
#   rows, and the paths the night changed (distinct paths its stream names,
#   the kernel's temporary o<ino>-<gen>-<n> names left out); bytes per
#   changed path (goal: at most 200), for night 1 bytes per path; n11 (no
#   change) last: what it adds.
# - the full replay: `rreceive -f` of the 10 streams, the first in full,
#   the rest --in-place (the cheapest replay: no copy of the parent), into
#   a fresh ext4 (loop image), cold (stream files evicted) and warm (read
#   into the page cache first).
# - restoring the 1 MiB file from n10 (`rreceive --catalog DB --restore
#   n10/catbench/one-mib.bin DEST`, DEST on another fresh ext4): cold
#   (stream files and catalog evicted) and warm; bytes read as the tool
#   tells them ("read R bytes of stream files (S bytes in the chain)"), as
#   /proc/PID/io counts them (rchar, read_bytes; the runner reads its own
#   /proc/self/io around the child, whose I/O is added to it when reaped),
#   and as strace sees them on the stream files alone (`strace -f -P
#   FILE...`: the sum of read/pread64 returns); restore time / replay time
#   (goal: at most 0.05) and bytes read / chain bytes (goal: at most 1 %).
# - restoring a subtree (SUBTREE, share/doc by default) the same way, for
#   information.
# Both restores are compared with the snapshot (cmp; diff -r and owner,
# mode, size, mtime of every path).
#
# "Cold" here evicts the files involved (posix_fadvise DONTNEED after
# fsync) rather than dropping the whole machine's page cache.
#
# Usage: sudo benches/catalog.sh
#        sudo SRC=/usr/share/doc SUBTREE=. benches/catalog.sh   (a quick try)
#
# Environment (all optional):
#   SRC=/usr         the tree copied as night 1
#   SUBTREE=         the subtree of n10 restored (default: share/doc when
#                    there, else the directory closest to 3,000 entries)
#   RUNS=5           warm restore runs (after one untimed)
#   COLD_RUNS=3      cold restore runs
#   REPLAY_WARM=1    also time a warm replay (0: cold only)
#   IMG_DIR=/var/tmp/rsend-bench   where the image is kept between runs
#   REBUILD=         1: build the image again
#   RESULTS_DIR=     copy catalog.md and catalog.jsonl here
#   TMPDIR=/tmp      stream files (about SRC's size), the ext4 images
#
# Runtime here (2 vCPUs, virtio disk, SRC=/usr): about 3 minutes, of which
# building the image took 67 s the first time; most of the rest is the full
# send, cataloging night 1 and the two replays.
set -euo pipefail
BENCH=catalog.sh
# shellcheck source=benches/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SRC=${SRC:-/usr}
SUBTREE=${SUBTREE:-}
RUNS=${RUNS:-5}
COLD_RUNS=${COLD_RUNS:-3}
REPLAY_WARM=${REPLAY_WARM:-1}
IMG_DIR=${IMG_DIR:-/var/tmp/rsend-bench}
REBUILD=${REBUILD:-}
RESULTS_DIR=${RESULTS_DIR:-}
ONE=catbench/one-mib.bin
(( RUNS >= 1 && COLD_RUNS >= 1 )) || die "RUNS and COLD_RUNS must be at least 1"
[[ -d $SRC ]] || die "SRC=$SRC is not a directory"
for t in btrfs mkfs.btrfs mkfs.ext4 losetup python3 strace cmp diff; do
    command -v "$t" >/dev/null || die "$t not found"
done
build_rsend
build_rdump
cargo_release rreceive
RRECEIVE="$TARGET_DIR/release/rreceive"
[[ $("$RRECEIVE" --help) == *--catalog* ]] || die "$RRECEIVE has no --catalog"

scratch_dir rsend-catalog-bench
[[ $(stat -f -c %T "$TMP") != tmpfs ]] ||
    log "NOTE: $TMP is on tmpfs: \"cold\" runs read from memory all the same"
mkdir -p "$IMG_DIR" "$TMP/mnt" "$TMP/streams" "$TMP/replay" "$TMP/rdest" "$TMP/out"
JSONL="$TMP/catalog.jsonl"
: >"$JSONL"
ST="$TMP/streams"
NIGHTS=(n01 n02 n03 n04 n05 n06 n07 n08 n09 n10)

# ---------------------------------------------------------------------------
# the data set

# One night's change in vol (python3 ROOT K), K = 2..10; prints what it did
# as JSON. Deterministic for a given tree.
read -r -d '' NIGHT_CHANGE <<'PY' || true
import json, os, random, stat, sys
root, k = sys.argv[1], int(sys.argv[2])
rnd = random.Random(5000 + k)
ONE = "catbench/one-mib.bin"
files, dirs = [], []
for d, ds, names in os.walk(root):
    ds.sort()
    rd = os.path.relpath(d, root)
    if rd.startswith("catbench"):
        continue
    if rd != "." and os.sep in rd:
        dirs.append((rd, len(names)))
    for n in sorted(names):
        p = os.path.join(d, n)
        st = os.lstat(p)
        if stat.S_ISREG(st.st_mode):
            files.append((os.path.relpath(p, root), st.st_size))
big = [p for _, p in sorted(((s, p) for p, s in files), reverse=True)[:3]]
cands = [p for p, _ in files if p not in big]
n = max(20, len(files) // 100)
pick = rnd.sample(cands, n)
kinds = ["rewritten", "rewritten", "rewritten", "appended", "appended", "touched", "touched",
         "chmod", "renamed", "deleted"]
done = {x: 0 for x in kinds}
for i, rel in enumerate(pick):
    p = os.path.join(root, rel)
    kind = kinds[i % len(kinds)]
    if kind == "rewritten":
        size = os.path.getsize(p)
        with open(p, "r+b") as f:
            f.seek(size // 2)
            f.write(rnd.randbytes(64))
    elif kind == "appended":
        with open(p, "ab") as f:
            f.write(rnd.randbytes(rnd.randint(1, 4096)))
    elif kind == "touched":
        os.utime(p, (1700000000 + k, 1700000000 + k))
    elif kind == "chmod":
        os.chmod(p, (os.lstat(p).st_mode & 0o7777) ^ 0o004)
    elif kind == "renamed":
        os.rename(p, p + f".r{k}")
    else:
        os.unlink(p)
    done[kind] += 1
for rel in big:
    with open(os.path.join(root, rel), "r+b") as f:
        size = os.fstat(f.fileno()).st_size
        for _ in range(8):
            f.seek(rnd.randrange(0, max(1, size - 4096)) & ~4095)
            f.write(rnd.randbytes(4096))
new = os.path.join(root, "catbench", f"new-n{k:02}")
os.makedirs(new)
for j in range(n // 10):
    with open(os.path.join(new, f"f{j}"), "wb") as f:
        f.write(rnd.randbytes(rnd.randint(1, 65536)))
one = os.path.join(root, ONE)
if k == 2:
    with open(one, "wb") as f:
        f.write(rnd.randbytes(1 << 20))
else:
    with open(one, "r+b") as f:
        for _ in range(4):
            ln = rnd.randint(16, 4096)
            f.seek(rnd.randrange(0, (1 << 20) - ln))
            f.write(rnd.randbytes(ln))
moved = None
if k == 6:
    some = [d for d, c in dirs if 10 <= c <= 100]
    if some:
        moved = rnd.choice(some)
        os.rename(os.path.join(root, moved), os.path.join(root, moved + ".moved6"))
out = dict(night=k, regular_files=len(files), picked=n, **done, big_files_written=len(big),
           new_files=n // 10, one_mib=("created" if k == 2 else "4 writes"), dir_renamed=moved,
           paths_changed=n + len(big) + n // 10 + 1 + (1 if moved else 0))
print(json.dumps(out))
PY

# gen_nights MNT: vol = cp -a SRC, n01; nights 2..10 (their change lists in
# MNT/changes/); n11 = n10 unchanged.
gen_nights() {
    local m=$1 k
    btrfs -q subvolume create "$m/vol"
    cp -a "$SRC/." "$m/vol/"
    mkdir -p "$m/vol/catbench" "$m/changes"
    sync -f "$m/vol"
    btrfs -q subvolume snapshot -r "$m/vol" "$m/n01"
    for k in 2 3 4 5 6 7 8 9 10; do
        python3 -c "$NIGHT_CHANGE" "$m/vol" "$k" >"$m/changes/n$(printf %02d "$k").json"
        sync -f "$m/vol"
        btrfs -q subvolume snapshot -r "$m/vol" "$m/n$(printf %02d "$k")"
    done
    btrfs -q subvolume snapshot -r "$m/vol" "$m/n11"
}

IMG="$IMG_DIR/catalog$(echo "$SRC" | tr '/' '_')-$({ declare -f gen_nights; echo "$NIGHT_CHANGE"; } | sha256sum | cut -c1-12).img"
log "image $IMG"
mib=0
[[ -f $IMG && -z $REBUILD ]] || mib=$(du -sxm "$SRC" | cut -f1)
build_cached_image "$IMG" "$((mib * 2 + 2048))M" "$TMP/mnt" gen_nights
BUILT=$BUILD_SECONDS

# Facts of the snapshots, counted once per image (IMG.stats.json): paths of
# n01 and n10, the subtree chosen, the change lists.
if [[ ! -f $IMG.stats.json || -n $REBUILD ]]; then
    log "counting the snapshots (once)"
    loop_mount "$IMG" "$TMP/mnt" ro
    python3 - "$TMP/mnt" >"$IMG.stats.json.tmp" <<'PY'
import json, os, stat, sys
m = sys.argv[1]
def count(top):
    n = {"paths": 1, "files": 0, "dirs": 1, "symlinks": 0, "other": 0, "data_bytes": 0}
    seen = set()
    for d, ds, names in os.walk(top):
        for x in ds + names:
            n["paths"] += 1
            st = os.lstat(os.path.join(d, x))
            if stat.S_ISDIR(st.st_mode):
                n["dirs"] += 1
            elif stat.S_ISREG(st.st_mode):
                n["files"] += 1
                if st.st_ino not in seen:
                    seen.add(st.st_ino)
                    n["data_bytes"] += st.st_size
            elif stat.S_ISLNK(st.st_mode):
                n["symlinks"] += 1
            else:
                n["other"] += 1
    return n
out = {s: count(os.path.join(m, s)) for s in ("n01", "n10")}
top = os.path.join(m, "n10")
if os.path.isdir(os.path.join(top, "share/doc")):
    sub = "share/doc"
else:
    best = None
    for d, ds, names in os.walk(top):
        rel = os.path.relpath(d, top)
        if rel == "." or rel.count(os.sep) > 2:
            continue
        c = sum(len(a) + len(b) for _, a, b in os.walk(d))
        if best is None or abs(c - 3000) < abs(best[1] - 3000):
            best = (rel, c)
    sub = best[0] if best else "."
out["default_subtree"] = sub
out["changes"] = [json.load(open(os.path.join(m, "changes", f))) for f in sorted(os.listdir(os.path.join(m, "changes")))]
print(json.dumps(out, indent=1))
PY
    loop_umount "$TMP/mnt"
    mv "$IMG.stats.json.tmp" "$IMG.stats.json"
fi
[[ -n $SUBTREE ]] || SUBTREE=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["default_subtree"])' "$IMG.stats.json")
log "subtree restored: n10/$SUBTREE"

# ---------------------------------------------------------------------------
# helpers

# run.py OUT.jsonl LABEL EVICT STDERR -- ARGV...: evicts the files listed in
# EVICT (a file of paths, or -) from the page cache, runs ARGV once (stdout
# to /dev/null, stderr to STDERR) and appends one JSON line: wall, user,
# sys, peak RSS, and the child's /proc I/O counters (the difference of this
# process's /proc/self/io across the wait: a reaped child's counters are
# added to its parent's).
cat >"$TMP/run.py" <<'PY'
import json, os, sys, time
out, label, evict, errf = sys.argv[1:5]
assert sys.argv[5] == "--"
argv = sys.argv[6:]
def io():
    d = {}
    for l in open("/proc/self/io"):
        k, v = l.split(":")
        d[k] = int(v)
    return d
if evict != "-":
    for p in open(evict).read().split("\n"):
        if p:
            fd = os.open(p, os.O_RDONLY)
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
null = os.open("/dev/null", os.O_WRONLY)
err = os.open(errf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
a = io()
t = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.dup2(null, 1)
    os.dup2(err, 2)
    os.execvp(argv[0], argv)
_, st, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t
b = io()
rc = os.waitstatus_to_exitcode(st)
text = open(errf, errors="replace").read()
if rc != 0:
    sys.exit(f"{label}: {argv} failed (exit {rc}):\n{text[-3000:]}")
rec = {"label": label, "wall": wall, "user": ru.ru_utime, "sys": ru.ru_stime, "maxrss_kib": ru.ru_maxrss,
       "io": {k: b[k] - a[k] for k in b}, "stderr": text[-2000:]}
with open(out, "a") as f:
    f.write(json.dumps(rec) + "\n")
PY
RUNLOG="$TMP/runs.jsonl"
: >"$RUNLOG"
run1() { python3 "$TMP/run.py" "$RUNLOG" "$@"; }

# strace_sum TRACE: bytes the read-family calls in an strace -o file
# returned; other calls (mmap, sendfile, splice, ...) listed after.
strace_sum() {
    python3 - "$1" <<'PY'
import json, sys
reads = {"read", "pread64", "readv", "preadv", "preadv2"}
total, other = 0, []
for line in open(sys.argv[1]):
    body = line.split(" ", 1)[1].lstrip() if " " in line else line
    if body.rstrip().endswith("<unfinished ...>") or body.startswith("+++"):
        continue
    name = body[5:].split(" ")[0] if body.startswith("<... ") else body.split("(")[0]
    if name in reads:
        total += int(body.rsplit(" = ", 1)[1].split()[0])
    else:
        other.append(line.strip())
print(json.dumps({"bytes": total, "other_calls": other[:5], "other_count": len(other)}))
PY
}

# fresh_ext4 NAME MIB MNT: a fresh ext4 loop image in TMP mounted on MNT
# (inode tables written by mkfs, so no lazy init runs under the timing).
fresh_ext4() {
    local img="$TMP/$1.img"
    rm -f "$img"
    truncate -s "$2M" "$img"
    mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$img"
    loop_mount "$img" "$3"
}
drop_ext4() { # drop_ext4 NAME MNT
    loop_umount "$2"
    rm -f "$TMP/$1.img"
}

# ---------------------------------------------------------------------------
# streams

log "rsend: the streams (n01 full, n02..n11 incremental)"
prev=
for s in "${NIGHTS[@]}" n11; do
    run1 "send-$s" - "$TMP/out/send-$s.err" -- \
        "$RSEND" -q -d "$IMG" ${prev:+-p "$prev"} -f "$ST/$s.stream" "$s"
    prev=$s
done
CHAIN=0
for s in "${NIGHTS[@]}"; do
    CHAIN=$((CHAIN + $(stat -c %s "$ST/$s.stream")))
done
printf '%s\n' "${NIGHTS[@]/#/$ST/}" | sed 's/$/.stream/' >"$TMP/evict-streams"
log "chain n01..n10: $CHAIN bytes"

log "paths each stream names (rdump --json)"
for s in "${NIGHTS[@]}" n11; do
    "$RDUMP" --json "$ST/$s.stream" | python3 -c '
import json, re, sys
orphan = re.compile(rb"(^|/)o\d+-\d+-\d+(/|$)")
paths = set()
for line in sys.stdin:
    c = json.loads(line)
    if c["command"] in ("subvol", "snapshot", "end"):
        continue
    for k in ("path", "from", "to"):
        v = c.get(k)
        if v is None:
            continue
        b = bytes.fromhex(v["hex"]) if isinstance(v, dict) else v.encode()
        if not orphan.search(b):
            paths.add(b)
print(len(paths))' >"$TMP/out/paths-$s.txt"
done

# ---------------------------------------------------------------------------
# cataloging

DB="$TMP/catalog.db"
used_bytes() {
    python3 - "$DB" <<'PY'
import sqlite3, sys, json
c = sqlite3.connect(sys.argv[1])
pc, fl, ps = (c.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "freelist_count", "page_size"))
print(json.dumps({"file": pc * ps, "used": (pc - fl) * ps}))
PY
}
log "cataloging n01..n10, then n11 (each stream file evicted first)"
: >"$TMP/sizes.jsonl"
for s in "${NIGHTS[@]}" n11; do
    echo "$ST/$s.stream" >"$TMP/evict-one"
    [[ -f $DB ]] && echo "$DB" >>"$TMP/evict-one"
    run1 "catalog-$s" "$TMP/evict-one" "$TMP/out/catalog-$s.err" -- "$RRECEIVE" --catalog "$DB" -f "$ST/$s.stream"
    echo "{\"night\": \"$s\", \"size\": $(used_bytes)}" >>"$TMP/sizes.jsonl"
    log "  $s: $(tail -1 "$TMP/out/catalog-$s.err")"
done

python3 - "$DB" >"$TMP/out/tables.json" <<'PY'
import json, sqlite3, sys
c = sqlite3.connect(sys.argv[1])
owner = {n: t for n, t in c.execute("SELECT name, tbl_name FROM sqlite_schema")}
tables = {}
for name, size in c.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
    t = owner.get(name, name)
    tables.setdefault(t, {"rows": 0, "bytes": 0})["bytes"] += size
for t in tables:
    tables[t]["rows"] = c.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
per_night = {}
for sid, name in c.execute("SELECT id, name FROM snapshot ORDER BY id").fetchall():
    per_night[name.decode(errors="replace") if isinstance(name, bytes) else name] = {
        t: c.execute(f"SELECT count(*) FROM {t} WHERE snap = ?", (sid,)).fetchone()[0]
        for t in ("inode", "entry", "xattr", "extent")}
print(json.dumps({"tables": tables, "per_night": per_night}))
PY

# ---------------------------------------------------------------------------
# the full replay

SRC_MIB=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["n10"]["data_bytes"] >> 20)' "$IMG.stats.json")
replay() { # replay TAG: the 10 streams into a fresh ext4
    local tag=$1 s ev
    fresh_ext4 "replay" "$((SRC_MIB * 5 / 4 + 2048))" "$TMP/replay"
    ev="$TMP/evict-streams"
    [[ $tag == warm ]] && { ev=-; cat "$ST"/n??.stream >/dev/null; }
    for s in "${NIGHTS[@]}"; do
        if [[ $s == n01 ]]; then
            run1 "replay-$tag-$s" "$ev" "$TMP/out/replay-$s.err" -- "$RRECEIVE" -q -f "$ST/$s.stream" "$TMP/replay"
        else
            run1 "replay-$tag-$s" - "$TMP/out/replay-$s.err" -- "$RRECEIVE" -q --in-place -f "$ST/$s.stream" "$TMP/replay"
        fi
        ev=-
    done
    [[ -d $TMP/replay/n10 ]] || die "the replay made no n10"
    if [[ $tag == cold ]]; then
        cp -a "$TMP/replay/n10/$ONE" "$TMP/one-from-replay"
    fi
    drop_ext4 "replay" "$TMP/replay"
}
log "full replay, cold"
replay cold
if [[ $REPLAY_WARM == 1 ]]; then
    log "full replay, warm"
    replay warm
fi

# ---------------------------------------------------------------------------
# restores

fresh_ext4 "rdest" "$((SRC_MIB * 5 / 4 + 2048))" "$TMP/rdest"
{ cat "$TMP/evict-streams"; echo "$DB"; } >"$TMP/evict-all"
n=0
declare -A FIRST=()
restore() { # restore KIND TAG SPEC: one timed restore; the first of each KIND is kept
    local kind=$1 tag=$2 spec=$3 ev=-
    n=$((n + 1))
    [[ $tag == cold ]] && ev="$TMP/evict-all"
    run1 "restore-$kind-$tag" "$ev" "$TMP/out/restore-$kind-$n.err" -- \
        "$RRECEIVE" --catalog "$DB" --restore "$spec" "$TMP/rdest/r$n"
    [[ $kind == file ]] && cmp "$TMP/rdest/r$n" "$TMP/one-from-replay"
    if [[ -z ${FIRST[$kind]:-} ]]; then
        FIRST[$kind]="$TMP/rdest/r$n"
    else
        rm -rf "$TMP/rdest/r$n"
    fi
}
for kind in file subtree; do
    spec="n10/$ONE"
    [[ $kind == subtree ]] && spec="n10/$SUBTREE"
    log "restore $spec: $COLD_RUNS cold, 1 + $RUNS warm"
    for ((i = 0; i < COLD_RUNS; i++)); do restore "$kind" cold "$spec"; done
    restore "$kind" warmup "$spec"
    for ((i = 0; i < RUNS; i++)); do restore "$kind" warm "$spec"; done
    log "restore $spec under strace (stream files only)"
    args=()
    for s in "${NIGHTS[@]}"; do args+=(-P "$ST/$s.stream"); done
    strace -f -qq -s 0 -o "$TMP/out/strace-$kind.txt" \
        -e trace=read,pread64,readv,preadv,preadv2,mmap,sendfile,splice,copy_file_range "${args[@]}" \
        "$RRECEIVE" --catalog "$DB" --restore "$spec" "$TMP/rdest/strace-$kind" 2>"$TMP/out/strace-$kind.err"
    strace_sum "$TMP/out/strace-$kind.txt" >"$TMP/out/strace-$kind.json"
    rm -rf "$TMP/rdest/strace-$kind"
done

log "comparing the restores with the snapshot"
loop_mount "$IMG" "$TMP/mnt" ro
cmp "${FIRST[file]}" "$TMP/mnt/n10/$ONE" && SAME_FILE=identical || SAME_FILE=DIFFERENT
python3 - "$TMP/mnt/n10/$ONE" "${FIRST[file]}" "$TMP/mnt/n10/$SUBTREE" "${FIRST[subtree]}" >"$TMP/out/compare.json" <<'PY'
import json, os, stat, sys
def meta(p):
    st = os.lstat(p)
    m = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_mtime_ns)
    if not stat.S_ISDIR(st.st_mode):
        m += (st.st_size,)
    if stat.S_ISLNK(st.st_mode):
        m += (os.readlink(p),)
    return m
def tree(top):
    out = {".": meta(top)}
    for d, ds, names in os.walk(top):
        for x in ds + names:
            p = os.path.join(d, x)
            out[os.path.relpath(p, top)] = meta(p)
    return out
res = {}
for what, want, got in (("file", sys.argv[1], sys.argv[2]), ("subtree", sys.argv[3], sys.argv[4])):
    w, g = (tree(want), tree(got)) if os.path.isdir(want) else ({".": meta(want)}, {".": meta(got)})
    diff = [k for k in sorted(set(w) | set(g)) if w.get(k) != g.get(k)]
    res[what] = {"paths": len(w), "metadata_differences": len(diff), "first": diff[:5]}
print(json.dumps(res))
PY
if diff -r --no-dereference "$TMP/mnt/n10/$SUBTREE" "${FIRST[subtree]}" >"$TMP/out/subtree.diff" 2>&1; then
    SAME_SUB=identical
else
    SAME_SUB=DIFFERENT
    head -5 "$TMP/out/subtree.diff" >&2
fi
loop_umount "$TMP/mnt"
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------------------
# report

python3 - "$RUNLOG" "$TMP/sizes.jsonl" "$IMG.stats.json" "$TMP/out" "$CHAIN" "$ONE" "$SUBTREE" \
    "$SAME_FILE" "$SAME_SUB" "$SRC" "$BUILT" "$ST" >"$JSONL" <<'PY'
import json, os, re, statistics, sys
(runlog, sizes_f, stats_f, outd, chain, one, subtree, same_file, same_sub, src, built, st) = sys.argv[1:]
chain = int(chain)
runs = [json.loads(l) for l in open(runlog)]
sizes = [json.loads(l) for l in open(sizes_f)]
stats = json.load(open(stats_f))
by = lambda lab: [r for r in runs if r["label"] == lab]
nights = [f"n{k:02}" for k in range(1, 12)]
base = {"bench": "catalog", "src": src}
med = lambda xs: statistics.median(xs) if xs else None
# cataloging, per night
prev = {"file": 0, "used": 0}
changes = {c["night"]: c for c in stats["changes"]}
for s, sz in zip(nights, sizes):
    r = by(f"catalog-{s}")[0]
    m = re.search(r"(\d+) commands, (\d+) rows", r["stderr"])
    paths = int(open(os.path.join(outd, f"paths-{s}.txt")).read())
    grow = sz["size"]["used"] - prev["used"]
    k = int(s[1:])
    rec = dict(base, measure="catalog", night=s, stream_bytes=os.path.getsize(os.path.join(st, f"{s}.stream")),
               wall=r["wall"], cpu=r["user"] + r["sys"], maxrss_kib=r["maxrss_kib"],
               commands=int(m.group(1)) if m else None, rows=int(m.group(2)) if m else None,
               paths_in_stream=paths, db_used_bytes=sz["size"]["used"], db_file_bytes=sz["size"]["file"],
               growth_bytes=grow, bytes_per_path=grow / paths if paths else None,
               change=changes.get(k))
    tabs = json.load(open(os.path.join(outd, "tables.json")))
    rows_t = tabs["per_night"].get(s, {})
    rec["rows_by_table"] = rows_t
    rec["estimate_bytes"] = sum(v * tabs["tables"][t]["bytes"] / max(1, tabs["tables"][t]["rows"]) for t, v in rows_t.items())
    if s == "n01":
        rec["snapshot_paths"] = stats["n01"]["paths"]
        rec["bytes_per_snapshot_path"] = grow / stats["n01"]["paths"]
    print(json.dumps(rec))
    prev = sz["size"]
# sends, for scale
print(json.dumps(dict(base, measure="send", walls={s: by(f"send-{s}")[0]["wall"] for s in nights},
                      stream_bytes={s: os.path.getsize(os.path.join(st, f"{s}.stream")) for s in nights})))
# replays
replay = {}
for tag in ("cold", "warm"):
    rs = [r for r in runs if r["label"].startswith(f"replay-{tag}-")]
    if not rs:
        continue
    replay[tag] = sum(r["wall"] for r in rs)
    print(json.dumps(dict(base, measure="replay", cache=tag, wall=replay[tag], cpu=sum(r["user"] + r["sys"] for r in rs),
                          per_stream={r["label"].split("-")[-1]: r["wall"] for r in rs},
                          rchar=sum(r["io"]["rchar"] for r in rs), read_bytes=sum(r["io"]["read_bytes"] for r in rs),
                          write_bytes=sum(r["io"]["write_bytes"] for r in rs), chain_bytes=chain)))
# restores
for kind in ("file", "subtree"):
    tr = json.load(open(os.path.join(outd, f"strace-{kind}.json")))
    for tag in ("cold", "warm"):
        rs = by(f"restore-{kind}-{tag}")
        def tool(r):
            m = re.search(r"restored (\d+) files, (\d+) bytes .*; read (\d+) bytes of stream files \((\d+) bytes in the chain\)", r["stderr"])
            return tuple(int(x) for x in m.groups())
        t = [tool(r) for r in rs]
        walls = [r["wall"] for r in rs]
        rec = dict(base, measure="restore", what=kind, spec=f"n10/{one if kind == 'file' else subtree}", cache=tag,
                   runs=len(rs), wall={"median": med(walls), "min": min(walls), "max": max(walls)},
                   cpu=med([r["user"] + r["sys"] for r in rs]), maxrss_kib=max(r["maxrss_kib"] for r in rs),
                   files=t[0][0], bytes=t[0][1], tool_read=t[0][2], tool_chain=t[0][3], chain_bytes=chain,
                   rchar=med([r["io"]["rchar"] for r in rs]), read_bytes=med([r["io"]["read_bytes"] for r in rs]),
                   strace_read=tr["bytes"], strace_other_calls=tr["other_count"],
                   read_pct_of_chain=100 * t[0][2] / chain, strace_pct_of_chain=100 * tr["bytes"] / chain,
                   read_bytes_pct_of_chain=100 * med([r["io"]["read_bytes"] for r in rs]) / chain,
                   same_as_snapshot=(same_file if kind == "file" else same_sub))
        if tag in replay:
            rec["replay_wall"] = replay[tag]
            rec["time_ratio"] = med(walls) / replay[tag]
        if kind == "file":
            rec["goal_time_ratio"], rec["goal_pct"] = 0.05, 1.0
            rec["met"] = rec.get("time_ratio", 1) <= 0.05 and rec["read_pct_of_chain"] <= 1 and rec["strace_pct_of_chain"] <= 1
        print(json.dumps(rec))
print(json.dumps(dict(base, measure="compare", **json.load(open(os.path.join(outd, "compare.json"))),
                      image_build_seconds=float(built), n01=stats["n01"], n10=stats["n10"], chain_bytes=chain,
                      tables=json.load(open(os.path.join(outd, "tables.json"))))))
PY

python3 - "$JSONL" >"$TMP/table.md" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
def b(n):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:,.1f} {unit}"
    return f"{n:,} B"
def t(x):
    return f"{x:.2f} s" if x >= 1 else f"{x * 1000:.0f} ms"
goal = lambda ok: " **met**" if ok else " **missed**"
cat = [r for r in recs if r["measure"] == "catalog"]
print("Cataloging each night (`rreceive --catalog DB -f nNN.stream`, the stream file evicted from the page cache first);"
      " growth: the catalog's used pages after the night minus before; paths: distinct paths the night's stream names"
      " (temporary o<ino>-<gen>-<n> names left out):\n")
print("| night | stream | time | rows | paths | catalog growth | bytes per path (goal <= 200) | rows x bytes per row of their table, per path | catalog |")
print("|:---|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in cat:
    bpp = f"{r['bytes_per_path']:.0f}" if r["bytes_per_path"] is not None else "-"
    if r["night"] == "n01":
        bpp = f"{r['bytes_per_snapshot_path']:.0f} per path of the snapshot ({r['snapshot_paths']:,} paths)"
    elif r["night"] == "n11":
        bpp = "(no change)"
    elif r["bytes_per_path"] is not None:
        bpp += goal(r["bytes_per_path"] <= 200)
    print(f"| {r['night']} | {b(r['stream_bytes'])} | {t(r['wall'])} | {r['rows']:,} | {r['paths_in_stream']:,} "
          f"| {b(r['growth_bytes'])} | {bpp} | {r['estimate_bytes'] / max(1, r['paths_in_stream']):.0f} | {b(r['db_used_bytes'])} |")
inc = [r for r in cat if r["night"] not in ("n01", "n11")]
g, p = sum(r["growth_bytes"] for r in inc), sum(r["paths_in_stream"] for r in inc)
print(f"\nNights n02..n10 together: {b(g)} for {p:,} changed paths, {g / max(1, p):.0f} bytes per path"
      f"{goal(g / max(1, p) <= 200)}; n11 (no change) added {cat[-1]['rows']} rows and {b(cat[-1]['growth_bytes'])}"
      " (its snapshot and ancestry rows are not in the count).")
rp = {r["cache"]: r for r in recs if r["measure"] == "replay"}
print("\nFull replay of n01..n10 (`rreceive -f`, then `--in-place -f` for each incremental) into a fresh ext4:\n")
print("| page cache | time | CPU | stream bytes read (rchar) | read from disk |")
print("|:---|---:|---:|---:|---:|")
for tag, r in rp.items():
    print(f"| {tag} | {t(r['wall'])} | {t(r['cpu'])} | {b(r['rchar'])} | {b(r['read_bytes'])} |")
print("\nRestores from n10 (`rreceive --catalog DB --restore SPEC DEST`, DEST on a fresh ext4); time: median (min-max);"
      " bytes read: the tool's count of stream bytes, strace's (read/pread64 on the stream files), rchar and read_bytes"
      " of /proc/PID/io (the catalog's reads included):\n")
print("| what | page cache | runs | time | / replay (goal <= 0.05) | tool: stream bytes read | strace | rchar | from disk | of the chain (goal <= 1 %) | same as the snapshot |")
print("|:---|:---|---:|---:|---:|---:|---:|---:|---:|---:|:---|")
for r in recs:
    if r["measure"] != "restore":
        continue
    w = r["wall"]
    ratio = f"{r['time_ratio']:.4f}" if "time_ratio" in r else "-"
    if r["what"] == "file" and "time_ratio" in r:
        ratio += goal(r["time_ratio"] <= 0.05)
    pct = f"{r['read_pct_of_chain']:.3f} %"
    if r["what"] == "file":
        pct += goal(r["read_pct_of_chain"] <= 1 and r["strace_pct_of_chain"] <= 1)
    what = f"`{r['spec']}` ({r['files']:,} files, {b(r['bytes'])})"
    print(f"| {what} | {r['cache']} | {r['runs']} | {t(w['median'])} ({t(w['min'])}-{t(w['max'])}) | {ratio} "
          f"| {b(r['tool_read'])} | {b(r['strace_read'])} | {b(r['rchar'])} | {b(r['read_bytes'])} | {pct} | {r['same_as_snapshot']} |")
c = [r for r in recs if r["measure"] == "compare"][0]
print(f"\nChain n01..n10: {b(c['chain_bytes'])};"
      f" n01: {c['n01']['paths']:,} paths ({c['n01']['files']:,} regular files, {b(c['n01']['data_bytes'])});"
      f" n10: {c['n10']['paths']:,} paths. Restores against the snapshot (owner, mode, size, mtime, symlink targets):"
      f" file {c['file']['metadata_differences']} differences, subtree {c['subtree']['metadata_differences']} of {c['subtree']['paths']:,} paths"
      + (f" (first: {c['subtree']['first']})" if c['subtree']['metadata_differences'] else "") + ".")
print("\nThe catalog by table after n11 (dbstat; indexes with their table): " + "; ".join(
    f"{k} {v['rows']:,} rows, {b(v['bytes'])} ({v['bytes'] / max(1, v['rows']):.0f} B/row)" for k, v in c["tables"]["tables"].items()))
print("\nRows per night: " + "; ".join(f"{n}: " + ", ".join(f"{k} {v:,}" for k, v in t.items()) for n, t in c["tables"]["per_night"].items()))
s = [r for r in recs if r["measure"] == "send"][0]
print("\nrsend -f (for scale): " + ", ".join(f"{k} {t(v)}" for k, v in s["walls"].items()))
PY
{
    echo
    echo "machine: $(machine_line); $(nproc) CPUs, $(free -g | awk '/^Mem:/ { print $2 }') GiB RAM;"
    echo "$("$RSEND" --version) at $(git -C "$REPO" rev-parse --short HEAD)"
    echo "load average (1/5/15 min) at the end: $LOAD"
    echo
    cat "$TMP/table.md"
    echo
    echo "JSON lines ($JSONL):"
    cat "$JSONL"
} | tee "$TMP/catalog.md"
if [[ -n $RESULTS_DIR ]]; then
    mkdir -p "$RESULTS_DIR"
    cp "$TMP/catalog.md" "$JSONL" "$RUNLOG" "$RESULTS_DIR/"
fi
