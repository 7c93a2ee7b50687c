#!/bin/bash
# Regenerate testdata/incremental/ (all but scenarios.sh, which is the
# source): one btrfs image made by the real kernel holding every scenario of
# testdata/incremental/scenarios.sh as a subvolume NAME with read-only
# snapshots NAME.p (parent) and NAME.c (child), plus the chain subvolume with
# chain.0 ... chain.5; the kernel's streams (`btrfs send NAME.p`, `btrfs send
# -p NAME.p NAME.c`, the chain's full stream and its five incrementals),
# manifests of every snapshot (testdata/manifest.py --links), kernel.tsv
# (sizes and command counts of the kernel's streams) and README.md.
#
# Usage: sudo testdata/make-incremental.sh
#        sudo ONLY="dir_swap btrfs_030_dir_moved_under_child" testdata/make-incremental.sh
#             (a trial run of some scenarios into KEEP_STAGE or a temporary
#             directory; testdata/incremental/ is left alone)
#
# Needs: root, btrfs + loop devices, btrfs-progs >= 6.9.1, python3, zstd,
# xfsprogs (xfs_io), attr, acl, libcap2-bin, e2fsprogs, util-linux.
#
# Before anything is replaced, every stream is received with the real
# `btrfs receive` onto a second btrfs and each received snapshot must equal
# its source's manifest (hard-link groups included).  Everything happens in a
# mktemp -d directory whose mounts and loop devices are removed on exit, also
# on failure.  KEEP_STAGE=DIR copies the outputs (also of a failed run) to DIR.
set -euo pipefail

if [[ $EUID -ne 0 ]]; then
    echo "make-incremental.sh: must run as root" >&2
    exit 1
fi

export LC_ALL=C TZ=UTC
umask 022

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT="$HERE/incremental"
MANIFEST_PY="$HERE/manifest.py"
IMG_SIZE=${IMG_SIZE:-512M}
MKFS_ARGS=(-q -f)

TMP=$(mktemp -d /tmp/make-incremental.XXXXXX)
STAGE="$TMP/out"
mkdir -p "$STAGE/image" "$STAGE/streams" "$STAGE/manifests" "$TMP/notes" "$TMP/streams"
RAW="$TMP/streams"   # the streams uncompressed
MOUNTS=()

our_loops() {
    losetup -l -n -O NAME,BACK-FILE 2>/dev/null | while read -r dev back; do
        case $back in "$TMP"/*) echo "$dev" ;; esac
    done
}

cleanup() {
    local rc=$? i m dev
    set +e
    cd /
    release_held 2>/dev/null
    for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
        m=${MOUNTS[i]}
        mountpoint -q "$m" && { umount "$m" 2>/dev/null || umount -l "$m"; }
    done
    for dev in $(our_loops); do losetup -d "$dev"; done
    if [[ -n ${KEEP_STAGE:-} ]]; then
        mkdir -p "$KEEP_STAGE" && cp -r "$STAGE"/. "$KEEP_STAGE"/ &&
            echo "make-incremental.sh: outputs copied to $KEEP_STAGE" >&2
    fi
    if grep -qF " $TMP/" /proc/self/mounts; then
        echo "make-incremental.sh: WARNING: something is still mounted under $TMP, not removing it" >&2
    else
        rm -rf "$TMP"
    fi
    [[ $rc -eq 0 ]] || echo "make-incremental.sh: FAILED (exit $rc); $OUT left unchanged" >&2
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log() { echo "== $*" >&2; }
die() { echo "make-incremental.sh: ERROR: $*" >&2; exit 1; }

# shellcheck source=incremental/scenarios.sh
source "$OUT/scenarios.sh"

# shellcheck disable=SC2206
SELECTED=(${ONLY:-${SCENARIOS[@]}})
for n in "${SELECTED[@]}"; do
    [[ -n ${SCENARIO_DOC[$n]+x} ]] || die "unknown scenario $n"
done
FULL_RUN=1
[[ -z ${ONLY:-} ]] || FULL_RUN=0

# new_fs NAME: a fresh btrfs on a loop device (left in $NEW_DEV) at $TMP/NAME.
new_fs() {
    local img="$TMP/$1.img" mnt="$TMP/$1"
    truncate -s "$IMG_SIZE" "$img"
    mkfs.btrfs "${MKFS_ARGS[@]}" "$img" >/dev/null
    NEW_DEV=$(losetup --find --show "$img")
    mkdir "$mnt"
    mount -o "$SCENARIO_MOUNT_OPTS" "$NEW_DEV" "$mnt"
    MOUNTS+=("$mnt")
}

# Command counts of a stream file (first stream only): "NAME COUNT" lines.
STREAM_PY='
import sys, struct, collections
NAMES = {1:"subvol",2:"snapshot",3:"mkfile",4:"mkdir",5:"mknod",6:"mkfifo",7:"mksock",
  8:"symlink",9:"rename",10:"link",11:"unlink",12:"rmdir",13:"set_xattr",14:"remove_xattr",
  15:"write",16:"clone",17:"truncate",18:"chmod",19:"chown",20:"utimes",21:"end",
  22:"update_extent",23:"fallocate",24:"fileattr",25:"encoded_write",26:"enable_verity"}
d = open(sys.argv[1], "rb").read()
if d[:13] != b"btrfs-stream\0":
    raise SystemExit("bad magic")
pos, counts = 17, collections.Counter()
while True:
    ln, cmd = struct.unpack_from("<IH", d, pos)
    counts[NAMES.get(cmd, "cmd%d" % cmd)] += 1
    pos += 10 + ln
    if cmd == 21:
        break
print(" ".join("%s=%d" % kv for kv in sorted(counts.items())))
'

log "kernel $(uname -r), $(btrfs --version | head -n1)"
new_fs src
SRC_DEV=$NEW_DEV
SRC="$TMP/src"

log "building ${#SELECTED[@]} scenarios"
start=$(date +%s)
if [[ $FULL_RUN == 1 ]]; then
    SCENARIO_NOTES="$TMP/notes" scenario_build_all "$SRC"
else
    SCENARIO_NOTES="$TMP/notes" scenario_build_all "$SRC" "${SELECTED[@]}"
fi
log "built in $(($(date +%s) - start)) s"
btrfs filesystem sync "$SRC" >/dev/null

log "kernel streams and manifests"
cd "$SRC"
PAIRS=()     # "NAME PARENT CHILD": streams NAME.full.stream / NAME.incr.stream
for n in "${SELECTED[@]}"; do PAIRS+=("$n $n.p $n.c"); done
if [[ $FULL_RUN == 1 ]]; then
    for k in 1 2 3 4 5; do PAIRS+=("chain.$k chain.$((k - 1)) chain.$k"); done
fi
for pair in "${PAIRS[@]}"; do
    read -r n p c <<<"$pair"
    if [[ $n != chain.* ]]; then
        btrfs -q send -f "$RAW/$n.full.stream" "$p"
    fi
    btrfs -q send -f "$RAW/$n.incr.stream" -p "$p" "$c"
done
if [[ $FULL_RUN == 1 ]]; then
    btrfs -q send -f "$RAW/chain.0.full.stream" chain.0
fi
SNAPS=()
for n in "${SELECTED[@]}"; do SNAPS+=("$n.p" "$n.c"); done
[[ $FULL_RUN == 0 ]] || SNAPS+=(chain.0 chain.1 chain.2 chain.3 chain.4 chain.5)
for s in "${SNAPS[@]}"; do
    python3 "$MANIFEST_PY" --links "$SRC/$s" >"$STAGE/manifests/$s.manifest"
done
btrfs subvolume list -p -u -q -R "$SRC" >"$STAGE/image/subvolumes.txt"
cd /

log "btrfs receive of every stream onto a fresh btrfs, compared with the manifests"
new_fs dst
DST="$TMP/dst"
FINDINGS=()       # fatal: the manifests would not describe what a receive gives
KERNEL_NOTES=()   # "SNAP<TAB>note": known kernel behaviour, recorded in kernel-findings.tsv
# compare SNAP RECEIVED: data lines and hardlinks lines must be equal, except
# that the kernel may leave the time of the receive as the root's mtime (it
# creates orphans at the root without sending the root's times again).
compare() {
    local want="$STAGE/manifests/$1.manifest" got="$TMP/recv.manifest" d
    python3 "$MANIFEST_PY" --links "$2" >"$got"
    d=$(diff <(grep -v '^# \(manifest\|skipped\)' "$want") <(grep -v '^# \(manifest\|skipped\)' "$got") || true)
    [[ -n $d ]] || return 0
    if python3 - "$want" "$got" <<'PY'
import sys, time
def rows(p):
    return [l.rstrip("\n").split("\t") for l in open(p) if not l.startswith("# manifest") and not l.startswith("# skipped")]
w, g = rows(sys.argv[1]), rows(sys.argv[2])
diff = [(a, b) for a, b in zip(w, g) if a != b]
ok = len(w) == len(g) and len(diff) == 1
if ok:
    a, b = diff[0]
    recent = abs(float(b[7]) - time.time()) < 3600
    ok = a[0] == "2e" and a[:7] == b[:7] and a[8:] == b[8:] and recent
sys.exit(0 if ok else 1)
PY
    then
        KERNEL_NOTES+=("$1	root mtime left at the time of the receive")
    else
        FINDINGS+=("$1: the tree btrfs receive made from the kernel's streams differs from the snapshot:"$'\n'"$d")
        echo "$d" | head -n 20 >&2
    fi
}
for n in "${SELECTED[@]}"; do
    mkdir "$DST/$n"
    btrfs receive -q -f "$RAW/$n.full.stream" "$DST/$n" ||
        die "btrfs receive of $n.full.stream failed"
    btrfs receive -q -f "$RAW/$n.incr.stream" "$DST/$n" ||
        { FINDINGS+=("$n: btrfs receive of the kernel's incremental stream failed"); continue; }
    compare "$n.p" "$DST/$n/$n.p"
    compare "$n.c" "$DST/$n/$n.c"
done
if [[ $FULL_RUN == 1 ]]; then
    mkdir "$DST/chain"
    btrfs receive -q -f "$RAW/chain.0.full.stream" "$DST/chain" || die "btrfs receive of chain.0 failed"
    compare chain.0 "$DST/chain/chain.0"
    for k in 1 2 3 4 5; do
        btrfs receive -q -f "$RAW/chain.$k.incr.stream" "$DST/chain" ||
            die "btrfs receive of chain.$k.incr.stream failed"
        compare "chain.$k" "$DST/chain/chain.$k"
    done
fi
if [[ ${#FINDINGS[@]} -gt 0 ]]; then
    printf '%s\n' "${FINDINGS[@]}" >&2
    die "${#FINDINGS[@]} received trees differ from their snapshots (see above)"
fi

log "kernel.tsv, kernel-findings.tsv"
{
    echo "# snapshot	what btrfs receive of the kernel's streams got wrong (the rest of the tree matched)"
    [[ ${#KERNEL_NOTES[@]} -eq 0 ]] || printf '%s\n' "${KERNEL_NOTES[@]}"
} >"$STAGE/kernel-findings.tsv"
{
    echo "# stream	bytes	commands (counts of the first stream, from its headers)"
    for f in "$RAW"/*.stream; do
        printf '%s\t%s\t%s\n' "$(basename "$f" .stream)" "$(stat -c %s "$f")" "$(python3 -c "$STREAM_PY" "$f")"
    done
} >"$STAGE/kernel.tsv"

log "compress the streams"
for f in "$RAW"/*.stream; do
    zstd -q -19 --long -T1 -f "$f" -o "$STAGE/streams/$(basename "$f").zst"
done

log "copy the image (frozen, the held files still open), check and compress it"
scenario_image_copy "$SRC" "$TMP/src.img" "$TMP/image.img"
umount "$SRC"
losetup -d "$SRC_DEV"
COPY_DEV=$(losetup -r --find --show "$TMP/image.img")
GEN=$(btrfs inspect-internal dump-super "$COPY_DEV" | awk '$1 == "generation" {print $2}')
FSID=$(btrfs inspect-internal dump-super "$COPY_DEV" | awk '$1 == "fsid" {print $2}')
LOGROOT=$(btrfs inspect-internal dump-super "$COPY_DEV" | awk '$1 == "log_root" {print $2}')
[[ $LOGROOT == 0 ]] || die "the copy has a log tree (log_root $LOGROOT)"
btrfs check --readonly --check-data-csum "$COPY_DEV" >"$TMP/check.log" 2>&1 ||
    { cat "$TMP/check.log" >&2; die "btrfs check of the copy failed"; }
losetup -d "$COPY_DEV"
zstd -q -19 --long -T1 -f "$TMP/image.img" -o "$STAGE/image/dev1.img.zst"
zstd -q -d --long=27 -c "$STAGE/image/dev1.img.zst" | cmp - "$TMP/image.img" || die "zstd round trip differs"
{
    echo "devices=1"
    echo "mkfs=mkfs.btrfs ${MKFS_ARGS[*]} dev1.img (dev1.img: a sparse file of $IMG_SIZE)"
    echo "mount=$SCENARIO_MOUNT_OPTS"
    echo "state=copied while frozen (fsfreeze), not unmounted: read-only snapshots keep inodes with no links and orphan items"
    echo "log_root=$LOGROOT"
    echo "csum=crc32c"
    echo "nodesize=16384"
    echo "sectorsize=4096"
    echo "generation=$GEN"
    echo "fsid=$FSID"
    echo "scenarios=${#SELECTED[@]}"
    echo "kernel=$(uname -r)"
    echo "btrfs_progs=$(btrfs --version | head -n1)"
} >"$STAGE/image/INFO"

if [[ $FULL_RUN == 0 ]]; then
    log "trial run of ${#SELECTED[@]} scenarios passed; testdata/incremental left alone"
    exit 0
fi

log "README.md"
human() { numfmt --to=iec --suffix=B "$1"; }
stat_of() { awk -F'\t' -v s="$1" '$1 == s {print $2}' "$STAGE/kernel.tsv"; }
count_of() {
    awk -F'\t' -v s="$1" -v c="$2" '$1 == s { n = split($3, a, " "); for (i = 1; i <= n; i++) { split(a[i], kv, "="); if (kv[1] == c) { print kv[2]; exit } } print 0 }' "$STAGE/kernel.tsv"
}
{
    cat <<EOF
# testdata/incremental: incremental-send scenarios made by the real kernel

Generated by \`testdata/make-incremental.sh\` from \`scenarios.sh\` (the one hand-written file
here) -- do not edit the rest by hand. Regenerate with

    sudo testdata/make-incremental.sh

(\`sudo ONLY="name ..." testdata/make-incremental.sh\` is a trial run of some scenarios that
leaves this directory alone). Needs root, loop devices, btrfs in the kernel, btrfs-progs >=
6.9.1, python3, zstd, xfsprogs, attr, acl, libcap2-bin, e2fsprogs. Runtime: about three minutes.

Generated with kernel \`$(uname -r)\`, \`$(btrfs --version | head -n1)\`.

## How it is made

\`scenarios.sh\` defines each scenario as \`setup_NAME\` (the parent state) and \`change_NAME\`
(the child), optionally \`change_NAME_after_remount\` (after an unmount and mount, so freed
inode numbers are handed out again) and \`check_NAME\` (asserts that, e.g., an inode number
really was reused with a new generation). \`scenario_build\` runs them in a fresh subvolume
\`NAME\` on one filesystem (\`mkfs.btrfs ${MKFS_ARGS[*]}\` on a $IMG_SIZE sparse file, default
features, mounted \`$SCENARIO_MOUNT_OPTS\`): setup, every entry the setup touched gets the
times \`$T1\` (atime and mtime; times set on purpose far from now are kept), \`btrfs
filesystem sync\`, read-only snapshot \`NAME.p\` (and \`in_parent_snapshot_NAME\` in it, made
writable for the time); change, the same with \`$T2\`, snapshot \`NAME.c\`
(\`in_child_snapshot_NAME\`). The chain subvolume gets snapshots \`chain.0\` ... \`chain.5\`, each step's changes
stamped with its own time. File contents are deterministic, so the manifests are the same on
every run; uuids, generations, inode numbers and so the streams are not.

Before anything is replaced, every stream here was received with \`btrfs receive\` onto a
second btrfs, and every received snapshot matched its manifest, hard-link groups included.

## Layout

- \`image/dev1.img.zst\` -- the filesystem (\`zstd -19 --long\`), passed \`btrfs check
  --readonly --check-data-csum\`. It is a copy of the image file taken under \`fsfreeze\` (so
  consistent, \`log_root\` 0) while files unlinked in read-only snapshots were still held
  open: those snapshots keep inodes with no links and their orphan items, which an unmount
  would have deleted (closing the last descriptor deletes them even in a read-only subvolume,
  and taking a snapshot drops those of its source; fstests btrfs/058, 168 and 278 make them
  the same way). Mount it read-only: a writable mount would clean the orphans up.
- \`image/INFO\` (\`key=value\`, as in testdata/images), \`image/subvolumes.txt\` (\`btrfs
  subvolume list -p -u -q -R\`).
- \`manifests/<snapshot>.manifest\` -- \`testdata/manifest.py --links\` of every snapshot
  (\`NAME.p\`, \`NAME.c\`, \`chain.N\`): the manifest format plus \`# hardlinks\` lines.
- \`streams/NAME.full.stream.zst\` -- \`btrfs send NAME.p\`; \`streams/NAME.incr.stream.zst\`
  -- \`btrfs send -p NAME.p NAME.c\`; \`streams/chain.0.full.stream.zst\` and
  \`streams/chain.N.incr.stream.zst\` (\`-p chain.N-1 chain.N\`). Compressed with \`zstd -19
  --long\` (\`zstd -dc streams/x.stream.zst | btrfs receive --dump\` shows one).
- \`kernel.tsv\` -- bytes (uncompressed) and command counts of every stream.
- \`kernel-findings.tsv\` -- snapshots that \`btrfs receive\` of the kernel's own streams did
  not reproduce exactly, and how (so far only: the root's mtime is the time of the receive;
  the kernel creates orphans at the root and renames them away without sending the root's
  times again when the root itself did not change). Everything else of those trees matched.

## Used by

- \`crates/send/tests/incremental_fixtures.rs\` (no root): the kernel's streams replayed in
  memory give every manifest; the reader sees every snapshot as its manifest says; rsend's
  streams replayed the same way must give them too.
- \`crates/send/tests/incremental_kernel.rs\` (root): the image mounted read-only, the
  sender under test's streams received by \`btrfs receive\` and by rreceive onto ext4 and
  btrfs; its streams against the kernel's; the chain; on btrfs, the clone scenarios'
  extents shared in the source must be shared after the receive (crates/send/tests/common/sharing.rs).
  \`RSEND_SCENARIO_LIVE=1\` builds the image from scenarios.sh on the running kernel instead.

## Scenarios

Sizes and counts are the kernel's incremental stream (\`NAME.incr.stream\`); \`trunc\` is its
TRUNCATE count. Notes are what \`check_NAME\` printed, and findings from
\`kernel-findings.tsv\`.

| scenario | covers | incr bytes | trunc | notes |
|---|---|---|---|---|
EOF
    for n in "${SCENARIOS[@]}"; do
        note=$( { cat "$TMP/notes/$n"; awk -F'\t' -v s="$n.c" '$1 == s {print "kernel stream: " $2}' "$STAGE/kernel-findings.tsv"; } |
            tr '\n' ';' | sed 's/;$//; s/;/; /g')
        printf '| `%s` | %s | %s | %s | %s |\n' "$n" "${SCENARIO_DOC[$n]}" \
            "$(stat_of "$n.incr")" "$(count_of "$n.incr" truncate)" "$note"
    done
    cat <<EOF

The chain (\`chain_0\` ... \`chain_5\` in scenarios.sh): renames of directories and files,
moves up and down, deletions, a hard link removed and another made, data overwritten,
truncated and punched, xattrs changed and removed, a symlink retargeted, and in step 2 an inode
number reused with a new generation ($(tr '\n' ' ' <"$TMP/notes/chain")).

| stream | bytes | trunc |
|---|---|---|
| \`chain.0.full\` | $(stat_of chain.0.full) | $(count_of chain.0.full truncate) |
EOF
    for k in 1 2 3 4 5; do
        echo "| \`chain.$k.incr\` | $(stat_of "chain.$k.incr") | $(count_of "chain.$k.incr" truncate) |"
    done
    echo
    echo "Total size of testdata/incremental: $(du -sb "$STAGE" "$OUT/scenarios.sh" | awk '{s += $1} END {print s}' | numfmt --to=iec --suffix=B) (image $(human "$(stat -c %s "$STAGE/image/dev1.img.zst")"))."
} >"$STAGE/README.md"

log "replace $OUT"
rm -rf "$OUT/image" "$OUT/streams" "$OUT/manifests" "$OUT/kernel.tsv" "$OUT/kernel-findings.tsv" "$OUT/README.md"
cp -r "$STAGE/image" "$STAGE/streams" "$STAGE/manifests" "$STAGE/kernel.tsv" "$STAGE/kernel-findings.tsv" "$STAGE/README.md" "$OUT/"
log "done: $(du -sh "$OUT" | cut -f1) in $OUT"
