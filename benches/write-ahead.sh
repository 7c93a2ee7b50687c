#!/usr/bin/env bash
# benches/write-ahead.sh: what the write-ahead flushes of `--link` and
# `--in-place` incremental receives cost (issue #30). With durable
# checkpoints (the default) rreceive flushes what a change to a linked or
# in-place tree needs before the change: in `--link` mode a small list file
# before each LINK, and the copy of each file it unshares before the copy
# is renamed over the parent's link (unless reflinked, or on ext4 with
# auto_da_alloc); in `--in-place` mode the overlay's undo file (written
# out) and log (fdatasync) before each command that saved something new
# (syncfs instead on btrfs with --plain). `--no-durable` turns them off.
#
# The dataset (built once): a btrfs image whose snapshot s0 holds 20,000
# small files (benches/smalltree.py: 20 directories of 1,000 files of
# 1-3000 bytes) and 8 files of 8 MiB; s1 is s0 with 5,000 of the small
# files changed in part (16 bytes overwritten in the middle), 4 large ones
# changed (4 KiB in the middle) and one grown by 1 MiB, 200 files renamed
# (half into another directory; a send renames a file by LINK and UNLINK),
# 200 deleted, 200 created and 200 new hard links (LINK commands, half of
# them to files also changed). rsend makes the full stream of s0 and the
# incremental stream s0 -> s1 (98 MB and 9 MB).
#
# Each round, on a new filesystem each time: rreceive the full stream,
# `sync`, then time `rreceive --link -f incr.stream DEST; sync -f DEST`,
# by default and with --no-durable, then the same with --in-place. It
# prints the median of each, the ratio default / --no-durable, and (from
# one more receive of each under `strace -f -c -w`) the fdatasync, fsync
# and syncfs calls made and the wall time spent in them. Every received
# tree is checked with `rsend --verify` against s1 (and, for --link, the
# parent kept against s0); the first round's also with `diff -r` against
# s1 mounted from the source image.
#
#   sudo benches/write-ahead.sh [ext4|xfs|btrfs ...]   (ext4 and xfs by default)
#
# btrfs destinations are received with --plain (else rreceive takes real
# snapshots and there is nothing to flush). Needs root, loop devices,
# btrfs-progs, e2fsprogs, xfsprogs, python3, strace (installed if missing).
# WORK (default /var/tmp/rsend-bench-writeahead) keeps the source image and
# its streams; ROUNDS (default 5) rounds per filesystem; STRACE=0 skips the
# counting runs.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
cargo build --release -q
bin=$repo/target/release
work=${WORK:-/var/tmp/rsend-bench-writeahead}
rounds=${ROUNDS:-5}
mkdir -p "$work"
cd "$work"
cleanup() {
    umount dest 2>/dev/null || true
    umount src 2>/dev/null || true
    for img in dest.img src.img; do
        [ -e $img ] || continue
        losetup -j $img | cut -d: -f1 | while read -r dev; do losetup -d "$dev" || true; done
    done
}
trap cleanup EXIT
if [ "${STRACE:-1}" = 1 ] && ! command -v strace >/dev/null; then
    apt-get install -y -q strace >/dev/null
fi

# The source image, its snapshots and streams; rebuilt when smalltree.py or
# this script's change (the python below) is edited.
change_py='
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rnd = random.Random(30)
def path(i):
    return f"{root}/d{i // 1000:04d}/f{i % 1000:04d}"
for i in range(1, n, 4):  # 5,000 of 20,000 changed in part
    with open(path(i), "r+b") as fh:
        size = os.fstat(fh.fileno()).st_size
        fh.seek(max(0, size // 2 - 8))
        fh.write(rnd.randbytes(min(16, size)))
for k in range(4):  # large files: 4 KiB in the middle, one grown
    with open(f"{root}/big/b{k}", "r+b") as fh:
        fh.seek(4 << 20)
        fh.write(rnd.randbytes(4096))
with open(f"{root}/big/b4", "ab") as fh:
    fh.write(rnd.randbytes(1 << 20))
ndirs = (n + 999) // 1000
for i in range(2, n, 100):  # 200 renamed, half into the next directory
    d = i // 1000
    to = d if (i // 100) % 2 else (d + 1) % ndirs
    os.rename(path(i), f"{root}/d{to:04d}/r{i:05d}")
for i in range(3, n, 100):  # 200 deleted
    os.unlink(path(i))
for k in range(200):  # 200 created
    with open(f"{root}/d{k % ndirs:04d}/new{k:03d}", "wb") as fh:
        fh.write(rnd.randbytes(rnd.randint(1, 3000)))
for i in list(range(6, n, 200)) + list(range(9, n, 200)):  # 200 new links
    d = (i // 1000 + 3) % ndirs  # f..09 are among the changed files
    os.link(path(i), f"{root}/d{d:04d}/l{i:05d}")
'
key=$( (cat "$repo/benches/smalltree.py"; echo "$change_py") | sha256sum | cut -c1-16)
if [ "$(cat key 2>/dev/null)" != "$key" ] || [ ! -s incr.stream ]; then
    rm -f key src.img parent.stream incr.stream
    truncate -s 2G src.img
    mkfs.btrfs -q -f src.img
    mkdir -p src
    mount -o loop src.img src
    btrfs -q subvolume create src/vol
    python3 "$repo/benches/smalltree.py" make src/vol 20000
    mkdir src/vol/big
    for k in $(seq 0 7); do head -c 8M /dev/urandom >src/vol/big/b$k; done
    btrfs -q subvolume snapshot -r src/vol src/s0
    python3 -c "$change_py" src/vol 20000
    btrfs -q subvolume snapshot -r src/vol src/s1
    umount src
    "$bin/rsend" -q -d src.img -f parent.stream.tmp s0
    "$bin/rsend" -q -d src.img -p s0 -f incr.stream.tmp s1
    mv parent.stream.tmp parent.stream
    mv incr.stream.tmp incr.stream
    echo "$key" >key
fi
mkdir -p src dest
mount -o loop,ro src.img src
cat parent.stream incr.stream >/dev/null
echo "dataset: parent stream $(du -h --apparent-size parent.stream | cut -f1)," \
    "incremental $(du -h --apparent-size incr.stream | cut -f1);" \
    "$(find src/s1 -type f | wc -l) files in s1"

make_fs() {
    rm -f dest.img
    truncate -s 2G dest.img
    case $1 in
        # Inode tables and journal written now: no lazy init in the timing.
        ext4) mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 dest.img ;;
        xfs) mkfs.xfs -q -f dest.img ;;
        btrfs) mkfs.btrfs -q -f dest.img ;;
    esac
    mount -o loop dest.img dest
    "$bin/rreceive" -q -f parent.stream dest
    sync
}
drop_fs() {
    umount dest
    rm -f dest.img
}
median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
# check MODE FIRST: the tree received is s1, and --link left s0 as it was.
check() {
    local ign=flags
    [ "$1" = link ] && ign=flags,links
    "$bin/rsend" -q -d src.img --verify dest/s1 --ignore $ign s1 >verify.txt ||
        { echo "dest/s1 differs from s1 ($1):" >&2; head verify.txt >&2; exit 1; }
    if [ "$1" = link ]; then
        "$bin/rsend" -q -d src.img --verify dest/s0 --ignore $ign s0 >verify.txt ||
            { echo "dest/s0 differs from s0 after --link:" >&2; head verify.txt >&2; exit 1; }
    fi
    if [ "$2" = 1 ]; then
        diff -r --no-dereference src/s1 dest/s1 >/dev/null ||
            { echo "diff -r: dest/s1 differs from s1 ($1)" >&2; exit 1; }
    fi
}
# count FS MODE FLAGS...: fdatasync / fsync / syncfs calls of one receive.
count() {
    local fs=$1 mode=$2
    shift 2
    make_fs "$fs"
    strace -f -c -w -o strace.txt -e trace=fdatasync,fsync,syncfs \
        "$bin/rreceive" -q "$@" -f incr.stream dest
    check "$mode" 0
    drop_fs
    awk '$NF ~ /^(fdatasync|fsync|syncfs)$/ {c[$NF] = $4; t += $2}
         END {printf "%d/%d/%d (%.2f s in them)", c["fdatasync"], c["fsync"], c["syncfs"], t}' strace.txt
}

for fs in ${*:-ext4 xfs}; do
    plain=()
    [ "$fs" = btrfs ] && plain=(--plain)
    for mode in link in-place; do
        : >"$mode.default.txt"
        : >"$mode.nodurable.txt"
    done
    for r in $(seq 1 "$rounds"); do
        for mode in link in-place; do
            for d in default nodurable; do
                flags=("${plain[@]}" --$mode)
                [ $d = default ] || flags+=(--no-durable)
                make_fs "$fs"
                s=$(date +%s.%N)
                "$bin/rreceive" -q "${flags[@]}" -f incr.stream dest
                sync -f dest
                e=$(date +%s.%N)
                echo "$e - $s" | bc >>"$mode.$d.txt"
                check $mode $((r == 1))
                drop_fs
            done
        done
    done
    for mode in link in-place; do
        a=$(median <"$mode.default.txt")
        b=$(median <"$mode.nodurable.txt")
        counts=
        if [ "${STRACE:-1}" = 1 ]; then
            counts="; fdatasync/fsync/syncfs: default $(count "$fs" $mode "${plain[@]}" --$mode)"
            counts+=", --no-durable $(count "$fs" $mode "${plain[@]}" --$mode --no-durable)"
        fi
        printf '%s --%s: default %.2f s, --no-durable %.2f s (medians of %d), ratio %.3f%s\n' \
            "$fs" $mode "$a" "$b" "$rounds" "$(echo "$a / $b" | bc -l)" "$counts"
        printf '  rounds: default %s; --no-durable %s\n' \
            "$(paste -sd' ' "$mode.default.txt")" "$(paste -sd' ' "$mode.nodurable.txt")"
    done
done
