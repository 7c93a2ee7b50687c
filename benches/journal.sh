#!/usr/bin/env bash
# benches/journal.sh: what the journal that lets a killed receive resume
# costs (issue #30). rreceive receives a full stream of 100,000 small files
# (benches/smalltree.py: 100 directories of 1,000 files of 1-3000 bytes)
# onto a new filesystem each round, alternating with its journal (the
# default) and without it (RRECEIVE_JOURNAL_DIR where none can be made), and
# prints the median of each and their ratio (the goal: at most 1.05).
#
#   sudo benches/journal.sh [tmpfs|ext4|btrfs ...]   (all three by default)
#
# Needs root, loop devices, btrfs-progs, e2fsprogs, python3. WORK (default
# /var/tmp/rsend-bench-journal) keeps the source image and its stream;
# ROUNDS (default 5) rounds per filesystem.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q
bin=$PWD/target/release
work=${WORK:-/var/tmp/rsend-bench-journal}
rounds=${ROUNDS:-5}
mkdir -p "$work"
cd "$work"
cleanup() {
    umount src dest 2>/dev/null || true
}
trap cleanup EXIT
if [ ! -s tree.stream ]; then
    truncate -s 3G src.img
    mkfs.btrfs -q -f src.img
    mkdir -p src
    mount -o loop src.img src
    btrfs -q subvolume create src/vol
    python3 "$OLDPWD/benches/smalltree.py" make src/vol 100000
    btrfs -q subvolume snapshot -r src/vol src/s0
    umount src
    "$bin/rsend" -q -d src.img s0 -f tree.stream.tmp
    mv tree.stream.tmp tree.stream
fi
make_fs() {
    mkdir -p dest
    case $1 in
        tmpfs) mount -t tmpfs -o size=2g tmpfs dest ;;
        ext4) truncate -s 2G dest.img && mkfs.ext4 -q -F dest.img && mount -o loop dest.img dest ;;
        btrfs) truncate -s 2G dest.img && mkfs.btrfs -q -f dest.img && mount -o loop dest.img dest ;;
    esac
}
median() { sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
cat tree.stream >/dev/null
for fs in "${@:-tmpfs ext4 btrfs}"; do
    for fs1 in $fs; do
        : >with.txt
        : >without.txt
        for _ in $(seq 1 "$rounds"); do
            for mode in with without; do
                make_fs "$fs1"
                if [ $mode = without ]; then
                    export RRECEIVE_JOURNAL_DIR=/proc/no-journal
                else
                    unset RRECEIVE_JOURNAL_DIR
                fi
                s=$(date +%s.%N)
                "$bin/rreceive" -q -f tree.stream dest
                e=$(date +%s.%N)
                echo "$e - $s" | bc >>$mode.txt
                umount dest
                rm -f dest.img
            done
        done
        a=$(median <with.txt)
        b=$(median <without.txt)
        printf '%s: with the journal %.2f s, without %.2f s (medians of %d), ratio %.3f\n' \
            "$fs1" "$a" "$b" "$rounds" "$(echo "$a / $b" | bc -l)"
    done
done
