#!/bin/bash
# Regenerate testdata/clone/ (all but scenarios.sh, which is the source):
# one btrfs image made by the real kernel holding every scenario of
# testdata/clone/scenarios.sh (subvolumes NAME, NAME.x, ... and read-only
# snapshots NAME.*), the kernel's stream of every send a scenario declares
# (`btrfs send [-p P] [-c C]... SNAP`), manifests of every snapshot
# (testdata/manifest.py --links), kernel.tsv (one line per send: its
# arguments, the parent the kernel sent against, bytes, bytes cloned and
# written, command counts) and README.md.
#
# Usage: sudo testdata/make-clone.sh
#        sudo ONLY="reflink_whole_files btrfs_191_dedupe_into_both_snapshots" testdata/make-clone.sh
#             (a trial run of some scenarios; testdata/clone/ is left
#             alone, KEEP_STAGE=DIR keeps what it made)
#
# Needs: root, btrfs + loop devices, btrfs-progs >= 6.9.1, python3, zstd,
# xfsprogs (xfs_io), util-linux, coreutils.
#
# Before anything is replaced, each scenario's streams are received in order
# with the real `btrfs receive` onto a second btrfs, and every received
# snapshot must equal its source's manifest.  Everything happens in a
# mktemp -d directory whose mounts and loop devices are removed on exit,
# also on failure.
set -euo pipefail

if [[ $EUID -ne 0 ]]; then
    echo "make-clone.sh: must run as root" >&2
    exit 1
fi

export LC_ALL=C TZ=UTC
umask 022

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT="$HERE/clone"
MANIFEST_PY="$HERE/manifest.py"
IMG_SIZE=${IMG_SIZE:-256M}
MKFS_ARGS=(-q -f)
MOUNT_OPTS=noatime

TMP=$(mktemp -d /tmp/make-clone.XXXXXX)
STAGE="$TMP/out"
RAW="$TMP/streams"   # the streams uncompressed
mkdir -p "$STAGE/image" "$STAGE/streams" "$STAGE/manifests" "$RAW"
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
    for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
        m=${MOUNTS[i]}
        mountpoint -q "$m" && { umount "$m" 2>/dev/null || umount -l "$m"; }
    done
    for dev in $(our_loops); do losetup -d "$dev"; done
    if [[ -n ${KEEP_STAGE:-} ]]; then
        mkdir -p "$KEEP_STAGE" && cp -r "$STAGE"/. "$KEEP_STAGE"/ &&
            echo "make-clone.sh: outputs copied to $KEEP_STAGE" >&2
    fi
    if grep -qF " $TMP/" /proc/self/mounts; then
        echo "make-clone.sh: WARNING: something is still mounted under $TMP, not removing it" >&2
    else
        rm -rf "$TMP"
    fi
    [[ $rc -eq 0 ]] || echo "make-clone.sh: FAILED (exit $rc); $OUT left unchanged" >&2
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log() { echo "== $*" >&2; }
die() { echo "make-clone.sh: ERROR: $*" >&2; exit 1; }

# shellcheck source=clone/scenarios.sh
source "$OUT/scenarios.sh"

# shellcheck disable=SC2206
SELECTED=(${ONLY:-${CLONE_SCENARIOS[@]}})
for n in "${SELECTED[@]}"; do
    [[ -n ${CLONE_DOC[$n]+x} ]] || die "unknown scenario $n"
    [[ -n ${CLONE_SENDS[$n]:-} ]] || die "scenario $n declares no sends"
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
    mount -o "$MOUNT_OPTS" "$NEW_DEV" "$mnt"
    MOUNTS+=("$mnt")
}

# The snapshot a send sends: its last word.
send_snap() { local w; read -r -a w <<<"$1"; echo "${w[-1]}"; }

# Every snapshot a send names (-p, -c and the one sent).
send_snaps() { local w; read -r -a w <<<"$1"; printf '%s\n' "${w[@]}" | grep -v '^-'; }

# Bytes, bytes cloned, bytes written and command counts of a stream file.
STREAM_PY='
import sys, struct, collections
NAMES = {1:"subvol",2:"snapshot",3:"mkfile",4:"mkdir",5:"mknod",6:"mkfifo",7:"mksock",
  8:"symlink",9:"rename",10:"link",11:"unlink",12:"rmdir",13:"set_xattr",14:"remove_xattr",
  15:"write",16:"clone",17:"truncate",18:"chmod",19:"chown",20:"utimes",21:"end",
  22:"update_extent",23:"fallocate",24:"fileattr",25:"encoded_write",26:"enable_verity"}
d = open(sys.argv[1], "rb").read()
if d[:13] != b"btrfs-stream\0":
    raise SystemExit("bad magic")
pos, counts, cloned, written = 17, collections.Counter(), 0, 0
while True:
    ln, cmd = struct.unpack_from("<IH", d, pos)
    counts[NAMES.get(cmd, "cmd%d" % cmd)] += 1
    body, a = d[pos + 10:pos + 10 + ln], 0
    while a < len(body):
        t, l = struct.unpack_from("<HH", body, a)
        v = body[a + 4:a + 4 + l]
        if cmd == 16 and t == 24:    # CLONE_LEN
            cloned += struct.unpack("<Q", v)[0]
        if cmd == 15 and t == 19:    # DATA
            written += l
        a += 4 + l
    pos += 10 + ln
    if cmd == 21:
        break
print("%d\t%d\t%d\t%s" % (len(d), cloned, written, " ".join("%s=%d" % kv for kv in sorted(counts.items()))))
'

log "kernel $(uname -r), $(btrfs --version | head -n1)"
new_fs src
SRC_DEV=$NEW_DEV
SRC="$TMP/src"

log "building ${#SELECTED[@]} scenarios"
start=$(date +%s)
for n in "${SELECTED[@]}"; do
    opts=${CLONE_MOUNT_OPTS[$n]:-}
    [[ -z $opts ]] || mount -o "remount,$opts" "$SRC"
    log "build_$n"
    # Not in a condition, so that errexit holds inside build_NAME.
    (
        cd "$SRC"
        "build_$n"
    )
    btrfs filesystem sync "$SRC" >/dev/null
    [[ -z $opts ]] || mount -o remount,compress=no "$SRC"
    while read -r send; do
        while read -r s; do
            [[ $(btrfs property get -ts "$SRC/$s" ro 2>/dev/null) == ro=true ]] ||
                die "$n: $s (named by the send '$send') is not a read-only snapshot"
        done < <(send_snaps "$send")
    done <<<"${CLONE_SENDS[$n]}"
done
log "built in $(($(date +%s) - start)) s"
btrfs subvolume sync "$SRC" >/dev/null
btrfs filesystem sync "$SRC" >/dev/null
btrfs subvolume list -p -u -q -R "$SRC" >"$STAGE/image/subvolumes.txt"

# uuid or received uuid -> path, for naming the parent a stream's SNAPSHOT
# names (a received parent is named by its received uuid).
declare -A BY_UUID=()
# field VALUE-AFTER WORDS...: the word after the first WORD equal to VALUE-AFTER.
field() {
    local key=$1
    shift
    while [[ $# -gt 1 ]]; do
        [[ $1 != "$key" ]] || { echo "$2"; return; }
        shift
    done
}
while read -r line; do
    # shellcheck disable=SC2086
    r=$(field received_uuid $line)
    [[ $r == - ]] || BY_UUID[$r]=${line##* }
done < <(btrfs subvolume list -u -R "$SRC")
while read -r line; do
    # shellcheck disable=SC2086
    u=$(field uuid $line)
    [[ -n ${BY_UUID[$u]+x} ]] || BY_UUID[$u]=${line##* }
done < <(btrfs subvolume list -u -R "$SRC")

log "kernel streams"
TSV_ROWS=()
for n in "${SELECTED[@]}"; do
    k=0
    while read -r send; do
        k=$((k + 1))
        read -r -a words <<<"$send"
        args=()
        for ((i = 0; i < ${#words[@]}; i++)); do
            case ${words[i]} in
                -p | -c) args+=("${words[i]}" "$SRC/${words[i + 1]}"); i=$((i + 1)) ;;
                *) args+=("$SRC/${words[i]}") ;;
            esac
        done
        f="$RAW/$n.$k.stream"
        btrfs -q send -f "$f" "${args[@]}" || die "btrfs send $send failed"
        first=$(btrfs receive --dump -f "$f" | awk 'NR == 1')
        parent=-
        case $first in
            snapshot*)
                pu=$(grep -o 'parent_uuid=[^ ]*' <<<"$first" | cut -d= -f2)
                parent=${BY_UUID[$pu]:-?$pu}
                ;;
        esac
        TSV_ROWS+=("$n	$k	$send	$parent	$(python3 -c "$STREAM_PY" "$f")")
    done <<<"${CLONE_SENDS[$n]}"
done

log "manifests of every snapshot"
SNAPS=()
while read -r s; do
    for n in "${SELECTED[@]}"; do
        [[ $s != "$n".* ]] || { SNAPS+=("$s"); break; }
    done
done < <(btrfs subvolume list -r "$SRC" | awk '{print $NF}' | grep -v / | sort)
for s in "${SNAPS[@]}"; do
    python3 "$MANIFEST_PY" --links "$SRC/$s" >"$STAGE/manifests/$s.manifest"
done

log "btrfs receive of every scenario's streams in order, compared with the manifests"
new_fs dst
DST="$TMP/dst"
FINDINGS=()
KERNEL_NOTES=()
# compare SNAP RECEIVED: data lines and hardlinks lines must be equal, except
# that the kernel may leave the time of the receive as the root's mtime.
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
    k=0
    while read -r send; do
        k=$((k + 1))
        s=$(send_snap "$send")
        if btrfs receive -q -f "$RAW/$n.$k.stream" "$DST/$n"; then
            compare "$s" "$DST/$n/${s##*/}"
        else
            FINDINGS+=("$n: btrfs receive of the kernel's stream of '$send' failed")
            break
        fi
    done <<<"${CLONE_SENDS[$n]}"
done
if [[ ${#FINDINGS[@]} -gt 0 ]]; then
    printf '%s\n' "${FINDINGS[@]}" >&2
    die "${#FINDINGS[@]} receives failed or differ from their snapshots (see above)"
fi

log "kernel.tsv, kernel-findings.tsv"
{
    echo "# scenario	send	args	parent	bytes	clone_bytes	write_bytes	commands"
    printf '%s\n' "${TSV_ROWS[@]}"
} >"$STAGE/kernel.tsv"
{
    echo "# snapshot	what btrfs receive of the kernel's streams got wrong (the rest of the tree matched)"
    [[ ${#KERNEL_NOTES[@]} -eq 0 ]] || printf '%s\n' "${KERNEL_NOTES[@]}"
} >"$STAGE/kernel-findings.tsv"

log "compress the streams"
for f in "$RAW"/*.stream; do
    zstd -q -19 --long -T1 -f "$f" -o "$STAGE/streams/$(basename "$f").zst"
done

log "unmount, check and compress the image"
umount "$SRC"
losetup -d "$SRC_DEV"
cp --sparse=always "$TMP/src.img" "$TMP/image.img"
COPY_DEV=$(losetup -r --find --show "$TMP/image.img")
GEN=$(btrfs inspect-internal dump-super "$COPY_DEV" | awk '$1 == "generation" {print $2}')
FSID=$(btrfs inspect-internal dump-super "$COPY_DEV" | awk '$1 == "fsid" {print $2}')
btrfs check --readonly --check-data-csum "$COPY_DEV" >"$TMP/check.log" 2>&1 ||
    { cat "$TMP/check.log" >&2; die "btrfs check of the image failed"; }
losetup -d "$COPY_DEV"
zstd -q -19 --long -T1 -f "$TMP/image.img" -o "$STAGE/image/dev1.img.zst"
zstd -q -d --long=27 -c "$STAGE/image/dev1.img.zst" | cmp - "$TMP/image.img" || die "zstd round trip differs"
{
    echo "devices=1"
    echo "mkfs=mkfs.btrfs ${MKFS_ARGS[*]} dev1.img (dev1.img: a sparse file of $IMG_SIZE)"
    echo "mount=$MOUNT_OPTS"
    echo "state=unmounted cleanly"
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
    log "trial run of ${#SELECTED[@]} scenarios passed; testdata/clone left alone"
    column -t -s $'\t' "$STAGE/kernel.tsv" >&2
    exit 0
fi

log "README.md"
human() { numfmt --to=iec --suffix=B "$1"; }
{
    cat <<EOF
# testdata/clone: clone scenarios made by the real kernel

Generated by \`testdata/make-clone.sh\` from \`scenarios.sh\` (the one hand-written file
here) -- do not edit the rest by hand. Regenerate with

    sudo testdata/make-clone.sh

(\`sudo ONLY="name ..." testdata/make-clone.sh\` is a trial run of some scenarios that
leaves this directory alone). Needs root, loop devices, btrfs in the kernel, btrfs-progs >=
6.9.1, python3, zstd, xfsprogs. Runtime: about a minute.

Generated with kernel \`$(uname -r)\`, \`$(btrfs --version | head -n1)\`.

## How it is made

\`scenarios.sh\` defines each scenario as \`build_NAME\` (run at the top level of one
filesystem: \`mkfs.btrfs ${MKFS_ARGS[*]}\` on a $IMG_SIZE sparse file, default features,
mounted \`$MOUNT_OPTS\`, plus \`CLONE_MOUNT_OPTS[NAME]\` such as \`compress=zstd\` while it
builds) and the ordered list of sends a receiver replays (\`clone_sends NAME "[-p P] [-c
C]... SNAP" ...\`; a full send when neither -p nor -c is given). \`build_NAME\` makes
subvolumes \`NAME\`, \`NAME.x\`, ... and read-only snapshots \`NAME.*\` of them; each
snapshot's new entries get a fixed time (\`T1\`, \`T2\`, \`T3\`) first, so the manifests are
the same on every run; uuids, generations, extent addresses and so the streams are not.
Shared extents come from \`cp --reflink\`, \`xfs_io reflink\` (FICLONERANGE) and \`xfs_io
dedupe\` (FIDEDUPERANGE, also into read-only snapshots), and in
\`btrfs_110_clone_source_received_uuid\` from a \`btrfs send | btrfs receive\` onto the same
filesystem (a received snapshot, with a received uuid, as a clone source; the snapshot
it was sent from is \`btrfs_110_clone_source_received_uuid.orig/...\`, in a directory, and
has no manifest here).

Before anything was replaced, every scenario's streams were received in order with
\`btrfs receive\` onto a second btrfs, and every received snapshot matched its manifest,
hard-link groups included.

## Layout

- \`image/dev1.img.zst\` -- the filesystem (\`zstd -19 --long\`), unmounted cleanly, passed
  \`btrfs check --readonly --check-data-csum\`.
- \`image/INFO\` (\`key=value\`, as in testdata/images), \`image/subvolumes.txt\` (\`btrfs
  subvolume list -p -u -q -R\`).
- \`manifests/<snapshot>.manifest\` -- \`testdata/manifest.py --links\` of every snapshot
  at the top level.
- \`streams/NAME.K.stream.zst\` -- the kernel's stream of send K (from 1) of scenario NAME,
  \`zstd -19 --long\` (\`zstd -dc streams/x.stream.zst | btrfs receive --dump\` shows one).
- \`kernel.tsv\` -- one line per send: scenario, K, the send's arguments, the parent the
  kernel sent against (for \`-c\` without \`-p\`, the one btrfs-progs picked; \`-\` for a
  full send), stream bytes, bytes cloned (CLONE lengths), bytes written (WRITE data),
  command counts.
- \`kernel-findings.tsv\` -- snapshots that \`btrfs receive\` of the kernel's own streams
  did not reproduce exactly, and how.

## Used by

- \`crates/send/tests/clone_kernel.rs\` (root): the image attached read-only; the
  committed kernel streams and rsend's streams of the same sends received in order by
  \`btrfs receive\` and rreceive onto btrfs and by rreceive onto ext4; every received
  snapshot against its manifest; on btrfs, every pair of blocks that share an extent in
  the source must share one at the destination (FIEMAP), except where the kernel's rules
  make it write; rsend's stream sizes against the kernel's.
- \`crates/send/tests/clone_fixtures.rs\` (no root): the reader sees every snapshot as its
  manifest says; the kernel's and rsend's streams replayed in memory give every manifest.

Where the kernel's own streams do not keep all sharing (its rules for clone sources and
ranges: one sector from offset 0, EOF blocks, the offset filter of the backref walk), the
blocks and the rule are listed in \`EXCEPTIONS\` in crates/send/tests/clone_kernel.rs, which
also fails when one is no longer needed.

## Scenarios

Bytes are the kernel's streams; cloned and written are the bytes of its CLONE and WRITE
commands.

| scenario | covers | sends (parent the kernel used) | bytes | cloned | written |
|---|---|---|---|---|---|
EOF
    for n in "${SELECTED[@]}"; do
        awk -F'\t' -v n="$n" -v doc="${CLONE_DOC[$n]}" '
            $1 == n {
                s = s (s == "" ? "" : "<br>") "`" $3 "`" ($4 == "-" ? "" : " (" $4 ")")
                b = b (b == "" ? "" : "<br>") $5
                c = c (c == "" ? "" : "<br>") $6
                w = w (w == "" ? "" : "<br>") $7
            }
            END { printf "| `%s` | %s | %s | %s | %s | %s |\n", n, doc, s, b, c, w }' "$STAGE/kernel.tsv"
    done
    echo
    echo "Total size of testdata/clone: $(du -sb "$STAGE" "$OUT/scenarios.sh" | awk '{s += $1} END {print s}' | numfmt --to=iec --suffix=B) (image $(human "$(stat -c %s "$STAGE/image/dev1.img.zst")"))."
} >"$STAGE/README.md"

log "replace $OUT"
rm -rf "$OUT/image" "$OUT/streams" "$OUT/manifests" "$OUT/kernel.tsv" "$OUT/kernel-findings.tsv" "$OUT/README.md"
cp -r "$STAGE/image" "$STAGE/streams" "$STAGE/manifests" "$STAGE/kernel.tsv" "$STAGE/kernel-findings.tsv" "$STAGE/README.md" "$OUT/"
log "done: $(du -sh "$OUT" | cut -f1) in $OUT"
