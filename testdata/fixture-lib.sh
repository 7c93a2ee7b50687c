# shellcheck shell=bash
# The machinery testdata/make-incremental.sh and testdata/make-clone.sh
# share (sourced, not run): the temporary directory and its cleanup, fresh
# btrfs filesystems on loop devices, stream statistics, comparing a received
# tree with its manifest, compressing the streams and the image, and the
# common parts of image/INFO and README.md.
#
# The sourcing script sets HERE (testdata/) and calls fixture_setup first.

# fixture_setup PROG OUT: PROG names the script in messages, OUT is the
# directory it regenerates.  Checks for root, sets the environment, makes
# $TMP (a mktemp -d directory holding $STAGE, the outputs, and $RAW, the
# streams uncompressed) and installs the cleanup trap.  FIXTURE_BEFORE_CLEANUP,
# when set, names a function the cleanup calls first (its errors ignored).
fixture_setup() {
    FIXTURE_PROG=$1
    OUT=$2
    if [[ $EUID -ne 0 ]]; then
        echo "$FIXTURE_PROG: must run as root" >&2
        exit 1
    fi
    export LC_ALL=C TZ=UTC
    umask 022
    MANIFEST_PY="$HERE/manifest.py"
    MKFS_ARGS=(-q -f)
    TMP=$(mktemp -d "/tmp/${FIXTURE_PROG%.sh}.XXXXXX")
    STAGE="$TMP/out"
    RAW="$TMP/streams"
    mkdir -p "$STAGE/image" "$STAGE/streams" "$STAGE/manifests" "$RAW"
    MOUNTS=()
    FINDINGS=()       # fatal: the manifests would not describe what a receive gives
    KERNEL_NOTES=()   # "SNAP<TAB>note": known kernel behaviour, recorded in kernel-findings.tsv
    trap fixture_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

fixture_our_loops() {
    losetup -l -n -O NAME,BACK-FILE 2>/dev/null | while read -r dev back; do
        case $back in "$TMP"/*) echo "$dev" ;; esac
    done
}

fixture_cleanup() {
    local rc=$? i m dev
    set +e
    cd /
    [[ -z ${FIXTURE_BEFORE_CLEANUP:-} ]] || "$FIXTURE_BEFORE_CLEANUP" 2>/dev/null
    for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
        m=${MOUNTS[i]}
        mountpoint -q "$m" && { umount "$m" 2>/dev/null || umount -l "$m"; }
    done
    for dev in $(fixture_our_loops); do losetup -d "$dev"; done
    if [[ -n ${KEEP_STAGE:-} ]]; then
        mkdir -p "$KEEP_STAGE" && cp -r "$STAGE"/. "$KEEP_STAGE"/ &&
            echo "$FIXTURE_PROG: outputs copied to $KEEP_STAGE" >&2
    fi
    if grep -qF " $TMP/" /proc/self/mounts; then
        echo "$FIXTURE_PROG: WARNING: something is still mounted under $TMP, not removing it" >&2
    else
        rm -rf "$TMP"
    fi
    [[ $rc -eq 0 ]] || echo "$FIXTURE_PROG: FAILED (exit $rc); $OUT left unchanged" >&2
    exit "$rc"
}

# fixture_select ALL DOC: SELECTED is $ONLY's scenarios, else all of the
# array named ALL; each must have an entry in the associative array named
# DOC. FULL_RUN is 1 when all were selected (outputs replaced), else 0.
fixture_select() {
    local -n all=$1 doc=$2
    local n
    # shellcheck disable=SC2206
    SELECTED=(${ONLY:-${all[@]}})
    for n in "${SELECTED[@]}"; do
        [[ -n ${doc[$n]+x} ]] || die "unknown scenario $n"
    done
    FULL_RUN=1
    [[ -z ${ONLY:-} ]] || FULL_RUN=0
}

log() { echo "== $*" >&2; }
die() { echo "$FIXTURE_PROG: ERROR: $*" >&2; exit 1; }
human() { numfmt --to=iec --suffix=B "$1"; }

# new_fs NAME: a fresh btrfs (mounted $MOUNT_OPTS) on a loop device (left in
# $NEW_DEV) at $TMP/NAME.
new_fs() {
    local img="$TMP/$1.img" mnt="$TMP/$1"
    truncate -s "$IMG_SIZE" "$img"
    mkfs.btrfs "${MKFS_ARGS[@]}" "$img" >/dev/null
    NEW_DEV=$(losetup --find --show "$img")
    mkdir "$mnt"
    mount -o "$MOUNT_OPTS" "$NEW_DEV" "$mnt"
    MOUNTS+=("$mnt")
}

# stream_stats FILE: bytes, bytes cloned, bytes written (WRITE data) and command counts
# ("NAME=COUNT ...") of a stream file's first stream, tab-separated.
stream_stats() { python3 -c "$FIXTURE_STREAM_PY" "$1"; }
FIXTURE_STREAM_PY='
import sys, struct, collections
NAMES = {1:"subvol",2:"snapshot",3:"mkfile",4:"mkdir",5:"mknod",6:"mkfifo",7:"mksock",
  8:"symlink",9:"rename",10:"link",11:"unlink",12:"rmdir",13:"set_xattr",14:"remove_xattr",
  15:"write",16:"clone",17:"truncate",18:"chmod",19:"chown",20:"utimes",21:"end",
  22:"update_extent",23:"fallocate",24:"fileattr",25:"encoded_write",26:"enable_verity"}
d = open(sys.argv[1], "rb").read()
if d[:13] != b"btrfs-stream\0":
    raise SystemExit("bad magic")
version = struct.unpack_from("<I", d, 13)[0]
pos, counts, cloned, written = 17, collections.Counter(), 0, 0
while True:
    ln, cmd = struct.unpack_from("<IH", d, pos)
    counts[NAMES.get(cmd, "cmd%d" % cmd)] += 1
    body, a = d[pos + 10:pos + 10 + ln], 0
    while a < len(body):
        (t,) = struct.unpack_from("<H", body, a)
        if t == 19 and version >= 2:
            # From v2 on DATA has no length: it runs to the end of the command.
            l, a = len(body) - a - 2, a - 2
        else:
            (l,) = struct.unpack_from("<H", body, a + 2)
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

# compare SNAP RECEIVED: data lines and hardlinks lines must be equal, except
# that the kernel may leave the time of the receive as the root's mtime (it
# creates orphans at the root without sending the root's times again).  A
# difference is added to FINDINGS, that known one to KERNEL_NOTES.
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

# fixture_no_findings WHAT: fails, listing FINDINGS, if there are any
# ("N WHAT").
fixture_no_findings() {
    if [[ ${#FINDINGS[@]} -gt 0 ]]; then
        printf '%s\n' "${FINDINGS[@]}" >&2
        die "${#FINDINGS[@]} $1"
    fi
}

fixture_write_kernel_findings() {
    {
        echo "# snapshot	what btrfs receive of the kernel's streams got wrong (the rest of the tree matched)"
        [[ ${#KERNEL_NOTES[@]} -eq 0 ]] || printf '%s\n' "${KERNEL_NOTES[@]}"
    } >"$STAGE/kernel-findings.tsv"
}

fixture_compress_streams() {
    log "compress the streams"
    local f
    for f in "$RAW"/*.stream; do
        zstd -q -19 --long -T1 -f "$f" -o "$STAGE/streams/$(basename "$f").zst"
    done
}

# fixture_image IMAGE WHAT [no-log-tree]: attaches IMAGE read-only, reads
# GEN, FSID and LOGROOT from its super block (with no-log-tree, LOGROOT must be
# 0), checks it (WHAT names it in the error) and compresses it to
# $STAGE/image/dev1.img.zst.
fixture_image() {
    local dev
    dev=$(losetup -r --find --show "$1")
    GEN=$(btrfs inspect-internal dump-super "$dev" | awk '$1 == "generation" {print $2}')
    FSID=$(btrfs inspect-internal dump-super "$dev" | awk '$1 == "fsid" {print $2}')
    LOGROOT=$(btrfs inspect-internal dump-super "$dev" | awk '$1 == "log_root" {print $2}')
    [[ ${3:-} != no-log-tree || $LOGROOT == 0 ]] || die "the copy has a log tree (log_root $LOGROOT)"
    btrfs check --readonly --check-data-csum "$dev" >"$TMP/check.log" 2>&1 ||
        { cat "$TMP/check.log" >&2; die "btrfs check of the $2 failed"; }
    losetup -d "$dev"
    zstd -q -19 --long -T1 -f "$1" -o "$STAGE/image/dev1.img.zst"
    zstd -q -d --long=27 -c "$STAGE/image/dev1.img.zst" | cmp - "$1" || die "zstd round trip differs"
}

# fixture_write_info LINE...: image/INFO, with LINEs (the image's state)
# after mount=.
fixture_write_info() {
    {
        echo "devices=1"
        echo "mkfs=mkfs.btrfs ${MKFS_ARGS[*]} dev1.img (dev1.img: a sparse file of $IMG_SIZE)"
        echo "mount=$MOUNT_OPTS"
        printf '%s\n' "$@"
        echo "csum=crc32c"
        echo "nodesize=16384"
        echo "sectorsize=4096"
        echo "generation=$GEN"
        echo "fsid=$FSID"
        echo "scenarios=${#SELECTED[@]}"
        echo "kernel=$(uname -r)"
        echo "btrfs_progs=$(btrfs --version | head -n1)"
    } >"$STAGE/image/INFO"
}

# fixture_readme_head TITLE NEEDS RUNTIME: README.md's title and how to
# regenerate (NEEDS: the tools beyond btrfs-progs, python3 and zstd).
fixture_readme_head() {
    cat <<EOF
# testdata/$(basename "$OUT"): $1

Generated by \`testdata/$FIXTURE_PROG\` from \`scenarios.sh\` (the one hand-written file
here) -- do not edit the rest by hand. Regenerate with

    sudo testdata/$FIXTURE_PROG

(\`sudo ONLY="name ..." testdata/$FIXTURE_PROG\` is a trial run of some scenarios that
leaves this directory alone). Needs root, loop devices, btrfs in the kernel, btrfs-progs >=
6.9.1, python3, zstd, $2. Runtime: $3.

Generated with kernel \`$(uname -r)\`, \`$(btrfs --version | head -n1)\`.
EOF
}

fixture_readme_total() {
    echo "Total size of testdata/$(basename "$OUT"): $(du -sb "$STAGE" "$OUT/scenarios.sh" | awk '{s += $1} END {print s}' | numfmt --to=iec --suffix=B) (image $(human "$(stat -c %s "$STAGE/image/dev1.img.zst")"))."
}

# fixture_replace: $OUT's generated files replaced by the staged ones.
fixture_replace() {
    log "replace $OUT"
    rm -rf "$OUT/image" "$OUT/streams" "$OUT/manifests" "$OUT/kernel.tsv" "$OUT/kernel-findings.tsv" "$OUT/README.md"
    cp -r "$STAGE/image" "$STAGE/streams" "$STAGE/manifests" "$STAGE/kernel.tsv" "$STAGE/kernel-findings.tsv" "$STAGE/README.md" "$OUT/"
    log "done: $(du -sh "$OUT" | cut -f1) in $OUT"
}
