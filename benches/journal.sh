#!/usr/bin/env bash
# benches/journal.sh: what resuming costs a receive that never stops
# (issue #30): the journal that lets a killed receive resume, and the
# durable checkpoints that let one cut by a power loss resume. rreceive
# receives a full stream of 100,000 small files (benches/smalltree.py: 100
# directories of 1,000 files of 1-3000 bytes) onto a new filesystem each
# round, in turn as by default (journal and durable checkpoints), with the
# journal only (--no-durable), and with neither (--no-durable,
# RRECEIVE_JOURNAL_DIR where none can be made); each time includes a final
# `sync -f` (a backup is done when it is on disk). It prints the median of
# each, their ratios to "neither" (the goal: at most 1.05), and how many
# durable checkpoints were taken and the bytes their records wrote.
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
        : >default.txt
        : >journal.txt
        : >neither.txt
        for _ in $(seq 1 "$rounds"); do
            for mode in default journal neither; do
                make_fs "$fs1"
                flags=()
                if [ $mode = neither ]; then
                    export RRECEIVE_JOURNAL_DIR=/proc/no-journal
                else
                    unset RRECEIVE_JOURNAL_DIR
                fi
                [ $mode = default ] || flags=(--no-durable)
                s=$(date +%s.%N)
                "$bin/rreceive" -v "${flags[@]}" -f tree.stream dest 2>stats.txt
                sync -f dest
                e=$(date +%s.%N)
                echo "$e - $s" | bc >>$mode.txt
                if [ $mode = default ]; then
                    checkpoints=$(grep -o '[0-9]* durable checkpoint(s) ([0-9]* bytes' stats.txt | tr -d '(')
                fi
                umount dest
                rm -f dest.img
            done
        done
        a=$(median <default.txt)
        j=$(median <journal.txt)
        b=$(median <neither.txt)
        printf '%s: default %.2f s, journal only %.2f s, neither %.2f s (medians of %d); ratios to neither: default %.3f, journal only %.3f; %s recorded\n' \
            "$fs1" "$a" "$j" "$b" "$rounds" "$(echo "$a / $b" | bc -l)" "$(echo "$j / $b" | bc -l)" "$checkpoints"
    done
done
