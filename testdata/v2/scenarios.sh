# shellcheck shell=bash
# Protocol v2 scenarios: compressed extents (zlib, LZO, zstd; inline; only
# partly referenced), preallocated ranges, punched holes and chattr flags,
# for the v2 send tests (crates/send/tests/v2_*.rs) and the fixture
# generator (testdata/make-v2.sh).  Source it; it defines functions and
# constants only, runs nothing.  It sources testdata/clone/scenarios.sh for
# the helpers (fill, extents, reflink, prealloc, T1, T2, restamp).
#
# A scenario NAME is registered with
#
#   v2_scenario NAME "what it covers" [MOUNT_OPTIONS]
#
# and a function build_NAME, run with the working directory at the top
# level of the filesystem (mounted with MOUNT_OPTIONS added while it runs).
# It makes subvolume NAME and the read-only snapshots NAME.p (the parent)
# and NAME.c (the child) with v2_snap.  Every scenario is sent in full
# (NAME.p) and incrementally (-p NAME.p NAME.c), each as
# `--proto 2 --compressed-data`, `--no-data` and `--proto 2 --no-data`.
#
# The flags (chattr) of every inode of a snapshot are listed beside its
# manifest (NAMEs.flags): FS_IOC_GETFLAGS, which manifest.py does not
# record.
#
# Needs: btrfs-progs, python3, xfs_io (xfsprogs), e2fsprogs (chattr),
# coreutils; root.

# shellcheck source=../clone/scenarios.sh
source "$(dirname "${BASH_SOURCE[0]}")/../clone/scenarios.sh"

V2_SCENARIOS=()
declare -A V2_DOC=()
declare -A V2_MOUNT_OPTS=()

# v2_scenario NAME DESCRIPTION [MOUNT_OPTIONS]: registers NAME.
v2_scenario() {
    V2_SCENARIOS+=("$1")
    V2_DOC[$1]=$2
    V2_MOUNT_OPTS[$1]=${3:-}
}

# v2_snap NAME SUFFIX TIME: what changed in the last hour in NAME gets TIME,
# then NAME is committed and snapshotted read-only as NAME.SUFFIX.
v2_snap() {
    restamp "$1" "$3"
    btrfs filesystem sync "$1" >/dev/null
    btrfs -q subvolume snapshot -r "$1" "$1.$2"
}

# random FILE OFFSET LENGTH: LENGTH bytes that do not compress, at OFFSET.
random() {
    python3 -c '
import os, random, sys
path, off, length = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = random.Random(off * 7919 + length)
fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
os.pwrite(fd, r.randbytes(length), off)
os.close(fd)
' "$@"
}

# remount_with OPTIONS: the filesystem of the working directory remounted
# with OPTIONS added.
remount_with() {
    mount -o "remount,$1" "$(findmnt -n -o TARGET --target .)"
}

# punch FILE OFFSET LENGTH: a hole punched (the size kept).
punch() {
    xfs_io -c "fpunch $2 $3" "$1"
}

# The same shape of data under each compression: whole 128 KiB extents,
# a file written at once (several extents, the last one short), a small
# file, data that does not compress; then appends, an overwrite inside a
# compressed extent (which leaves it referenced in two parts), a truncation
# inside one and a new file.
compressed_setup() {
    extents a a 131072 131072 131072
    fill b 0 300000 b
    fill small 0 3000 small
    fill tiny 0 700 tiny
    random noise 0 200000
    mkdir -p dir/sub
    fill dir/sub/deep 0 150000 deep
}
compressed_change() {
    extents a a2 131072 50000
    fill b 135168 4096 b2
    truncate -s 70000 dir/sub/deep
    fill new 0 262144 new
    fill tiny 700 300 tiny2
    rm small
}

v2_scenario zlib_extents "compress-force=zlib: whole compressed extents, a file of several, small and incompressible files; appends, an overwrite inside an extent, a truncation inside one" compress-force=zlib
build_zlib_extents() {
    btrfs -q subvolume create zlib_extents
    (cd zlib_extents && compressed_setup)
    v2_snap zlib_extents p "$T1"
    (cd zlib_extents && compressed_change)
    v2_snap zlib_extents c "$T2"
}

v2_scenario lzo_extents "compress-force=lzo (LZO_4K framing): the shape of zlib_extents" compress-force=lzo
build_lzo_extents() {
    btrfs -q subvolume create lzo_extents
    (cd lzo_extents && compressed_setup)
    v2_snap lzo_extents p "$T1"
    (cd lzo_extents && compressed_change)
    v2_snap lzo_extents c "$T2"
}

v2_scenario zstd_extents "compress-force=zstd:3: the shape of zlib_extents" compress-force=zstd:3
build_zstd_extents() {
    btrfs -q subvolume create zstd_extents
    (cd zstd_extents && compressed_setup)
    v2_snap zstd_extents p "$T1"
    (cd zstd_extents && compressed_change)
    v2_snap zstd_extents c "$T2"
}

v2_scenario inline_compressed "compress-force=zstd and compress-force=zlib, max_inline=2048: compressed inline extents of 100 to 3900 bytes, an uncompressed inline one; grown within and beyond the inline limit, truncated inside a compressed inline extent" compress-force=zstd,max_inline=2048
build_inline_compressed() {
    btrfs -q subvolume create inline_compressed
    cd inline_compressed
    fill i100 0 100 i100
    fill i1000 0 1000 i1000
    fill i2000 0 2000 i2000
    fill i3900 0 3900 i3900
    random noise 0 1500
    remount_with compress-force=zlib
    fill z1500 0 1500 z1500
    xfs_io -c fsync z1500
    remount_with compress-force=zstd
    cd ..
    v2_snap inline_compressed p "$T1"
    cd inline_compressed
    fill i1000 1000 500 i1000b
    fill i2000 2000 20000 i2000b
    truncate -s 2500 i3900
    fill i100 0 100 i100b
    cd ..
    v2_snap inline_compressed c "$T2"
}

v2_scenario partial_compressed "compress-force=zstd: compressed extents referenced in part: a reflinked copy truncated inside one, parts reflinked into other files (ranges shorter than, as long as and longer than the extent on disk), a hole punched inside one; then more of the same" compress-force=zstd
build_partial_compressed() {
    btrfs -q subvolume create partial_compressed
    cd partial_compressed
    extents a a 131072 131072 131072 131072
    cp --reflink=always a b
    truncate -s 200000 b
    reflink a 4096 c 0 8192
    reflink a 139264 c 8192 122880
    fill c 131072 5000 c
    extents d d 131072 131072
    punch d 65536 8192
    random r 0 131072
    xfs_io -c fsync r
    reflink r 4096 rpart 0 16384
    # 4 to 36 KiB of extents nothing else references: one range is as
    # long as its extent is on disk (sent encoded), the shorter ones not.
    for k in 1 2 3 4 5 6 7 8 9; do
        fill "src$k" 0 131072 "src$k"
        xfs_io -c fsync "src$k"
        reflink "src$k" 4096 "range$k" 0 $((k * 4096))
        rm "src$k"
    done
    cd ..
    v2_snap partial_compressed p "$T1"
    cd partial_compressed
    fill b 40960 4096 b2
    reflink a 270336 e 0 20480
    truncate -s 300000 a
    punch d 180224 4096
    cd ..
    v2_snap partial_compressed c "$T2"
}

v2_scenario prealloc "preallocated ranges: inside a file, past its size (fallocate -k) and a whole file; written into, extended into, more preallocated"
build_prealloc() {
    btrfs -q subvolume create prealloc
    cd prealloc
    xfs_io -f -c "falloc 0 1048576" -c "pwrite -q -S 0x61 262144 65536" f1
    fill f2 0 102400 f2
    prealloc f2 102400 921600
    xfs_io -f -c "falloc 0 524288" f3
    cd ..
    v2_snap prealloc p "$T1"
    cd prealloc
    xfs_io -c "pwrite -q -S 0x62 524288 32768" f1
    fill f2 204800 4096 f2b
    xfs_io -c "falloc 524288 262144" f3
    xfs_io -f -c "falloc -k 0 65536" f4
    fill f5 0 8192 f5
    prealloc f5 8192 57344
    cd ..
    v2_snap prealloc c "$T2"
}

v2_scenario punched_holes "holes punched in the child (in the middle, at the end with the size kept, over a whole file, inside a compressed extent of a chattr +c file), a file cut and extended (a tail gap), one extended sparsely; an incremental send punches them (FALLOCATE)"
build_punched_holes() {
    btrfs -q subvolume create punched_holes
    cd punched_holes
    fill f1 0 1048576 f1
    fill f2 0 1048576 f2
    fill f3 0 131072 f3
    touch zc
    chattr +c zc
    fill zc 0 393216 zc
    fill f4 0 65536 f4
    cd ..
    v2_snap punched_holes p "$T1"
    cd punched_holes
    punch f1 196608 65536
    punch f1 942080 106496
    truncate -s 300000 f2
    truncate -s 2097152 f2
    punch f3 0 131072
    punch zc 135168 8192
    truncate -s 4194304 f4
    fill f4 3145728 4096 f4b
    cd ..
    v2_snap punched_holes c "$T2"
}

v2_scenario chattr_flags "inode flags (chattr) set, changed and cleared between the snapshots: immutable, append-only, nodump, noatime, sync, compress (then written), nocow (on an empty file, then written), a directory's nodump; a symlink beside them"
build_chattr_flags() {
    btrfs -q subvolume create chattr_flags
    cd chattr_flags
    for f in f_i f_a f_d f_A f_S f_c f_keep f_drop; do fill "$f" 0 20000 "$f"; done
    touch f_C
    mkdir d
    fill d/inner 0 1000 inner
    ln -s f_keep link
    cd ..
    restamp chattr_flags "$T1"
    chattr +d chattr_flags/f_keep
    chattr +A chattr_flags/f_drop
    chattr +a chattr_flags/f_a
    btrfs filesystem sync chattr_flags >/dev/null
    btrfs -q subvolume snapshot -r chattr_flags chattr_flags.p
    cd chattr_flags
    chattr -a f_a
    chattr -A f_drop
    chattr +c f_c
    fill f_c 20000 131072 f_c2
    chattr +C f_C
    fill f_C 0 65536 f_C
    cd ..
    restamp chattr_flags "$T2"
    chattr +i chattr_flags/f_i
    chattr +ad chattr_flags/f_a
    chattr +d chattr_flags/f_d chattr_flags/d
    chattr +A chattr_flags/f_A
    chattr +S chattr_flags/f_S
    btrfs filesystem sync chattr_flags >/dev/null
    btrfs -q subvolume snapshot -r chattr_flags chattr_flags.c
}

# flags_of ROOT: one line per inode path under ROOT (as manifest.py names
# it, "." for ROOT): hex path, TAB, FS_IOC_GETFLAGS in hex (symlinks,
# devices, fifos and sockets have none: "-").
flags_of() {
    python3 - "$1" <<'PY'
import fcntl, os, stat, struct, sys
root = os.fsencode(sys.argv[1])
FS_IOC_GETFLAGS = 0x80086601
rows = []
def add(p):
    st = os.lstat(p)
    flags = "-"
    if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            flags = "%x" % struct.unpack("l", fcntl.ioctl(fd, FS_IOC_GETFLAGS, b"\0" * 8))[0]
        finally:
            os.close(fd)
    rows.append((os.path.relpath(p, root), flags))
add(root)
for dirpath, dirs, files in os.walk(root):
    for n in dirs + files:
        add(os.path.join(dirpath, n))
for rel, flags in sorted(rows):
    print("%s\t%s" % (rel.hex(), flags))
PY
}
