# shellcheck shell=bash
# Clone scenarios: snapshots whose files share extents, and the sends that
# move them to a receiver, for the clone-search tests
# (crates/send/tests/clone_*.rs) and the fixture generator
# (testdata/make-clone.sh).  Source it; it defines functions and constants
# only, runs nothing.  It sources testdata/incremental/scenarios.sh for the
# helpers (fill, bytes, restamp, T1, T2).
#
# A scenario NAME is registered with
#
#   clone_scenario NAME "what it covers"
#   clone_sends NAME "SEND" ["SEND" ...]
#
# and a function build_NAME, run with the working directory at the top
# level of the filesystem.  It makes the subvolumes it needs (NAME, NAME.x,
# ...; the helper cs_subvol) and read-only snapshots of them named NAME.*
# (cs_snap), all at the top level; only build_btrfs_110_* also puts one in a
# directory.  CLONE_MOUNT_OPTS[NAME], when set, are mount options the
# filesystem has while build_NAME runs (compression); the generator syncs
# before it mounts without them again.
#
# Each SEND is `[-p PARENT] [-c SRC]... SNAP` with snapshot paths from the
# top level, as btrfs send takes them (a full send when neither -p nor -c is
# given; with -c and no -p, btrfs-progs picks the parent among the -c
# sources: see find_good_parent in btrfs-progs cmds/send.c).  A receiver
# replays the sends of a scenario in the order given onto an empty
# destination; every parent and clone source was received by an earlier
# send.
#
# Names of scenarios taken from fstests (tests/btrfs/NNN; the project's
# notes on them are section 5 of ../shared/reference/send-stream.md beside
# the repository) start with btrfs_NNN_ and do what those tests do, written
# anew, sizes scaled down.  The other fstests clone cases (094, 097, 108,
# 109, 117, 130, 149, 189, 200, 203, 229, 283, 319, 322) are incremental
# scenarios in testdata/incremental/scenarios.sh; of those, 130 and 283
# are here again as the full sends fstests makes of them, and 149's rule
# (one sector is never cloned from offset 0) is tested here on a regular
# extent (there the sector is a compressed inline extent).
#
# File data: fill (testdata/incremental/scenarios.sh) writes records naming
# their tag and file offset, so every 4 KiB block of a fill is different
# from every other.  The compressed scenarios use fill only: the sharing
# check tells the blocks of one compressed extent apart by their contents
# (FIEMAP gives only the extent's start for compressed extents).
#
# Needs: btrfs-progs, python3, xfs_io (xfsprogs), coreutils; root.

# shellcheck source=../incremental/scenarios.sh
source "$(dirname "${BASH_SOURCE[0]}")/../incremental/scenarios.sh"

CLONE_SCENARIOS=()
declare -A CLONE_DOC=()
declare -A CLONE_SENDS=()
declare -A CLONE_MOUNT_OPTS=()

# A third time, for scenarios with three snapshots of one subvolume.
T3="2023-03-04 05:06:07.555555555 UTC"

# clone_scenario NAME DESCRIPTION: registers NAME.
clone_scenario() {
    CLONE_SCENARIOS+=("$1")
    CLONE_DOC[$1]=$2
}

# clone_sends NAME SEND...: the sends of NAME, in replay order.
clone_sends() {
    local name=$1
    shift
    CLONE_SENDS[$name]=$(printf '%s\n' "$@")
}

# ---------------------------------------------------------------------------
# helpers (the working directory is the top level)

# cs_subvol PATH: a new subvolume.
cs_subvol() {
    btrfs -q subvolume create "$1"
}

# cs_snap SUBVOL SNAP TIME: everything in SUBVOL changed in the last hour
# gets TIME (atime and mtime), then SUBVOL is committed and snapshotted
# read-only as SNAP.
cs_snap() {
    restamp "$1" "$3"
    btrfs filesystem sync "$1" >/dev/null
    btrfs -q subvolume snapshot -r "$1" "$2"
}

# extents FILE TAG LEN...: appends one extent of LEN bytes per LEN (fill
# data tagged TAG), each flushed on its own so they stay separate extents.
extents() {
    local f=$1 tag=$2 off len
    shift 2
    off=$(stat -c %s "$f" 2>/dev/null || echo 0)
    for len in "$@"; do
        fill "$f" "$off" "$len" "$tag"
        xfs_io -c fsync "$f"
        off=$((off + len))
    done
}

# xfs_io_checked ARGS...: xfs_io, failing when a command prints an error
# (xfs_io's exit status does not tell a failed reflink).
xfs_io_checked() {
    local err rc=0
    err=$(xfs_io "$@" 2>&1 >/dev/null) || rc=$?
    [[ $rc -eq 0 && -z $err ]] || { echo "xfs_io $*: ${err:-exit status $rc}" >&2; return 1; }
}

# reflink SRC SRC_OFF DST DST_OFF LEN: FICLONERANGE (DST made when missing).
reflink() {
    xfs_io_checked -f -c "reflink $1 $2 $4 $5" "$3"
}

# dedupe SRC SRC_OFF DST DST_OFF LEN: FIDEDUPERANGE; DST is opened
# read-only, so it may lie in a read-only snapshot.
dedupe() {
    local out
    out=$(xfs_io -r -c "dedupe $1 $2 $4 $5" "$3")
    case $out in
        *"deduped $5/$5 bytes"*) ;;
        *) echo "dedupe $*: $out" >&2; return 1 ;;
    esac
}

# ---------------------------------------------------------------------------
# Full sends: the send root is the only clone source

clone_scenario reflink_whole_files "cp --reflink of a file of three extents to a second file and to one three directories down (the clone source path has several components)"
clone_sends reflink_whole_files "reflink_whole_files.s"
build_reflink_whole_files() {
    cs_subvol reflink_whole_files
    cd reflink_whole_files
    extents a a 65536 65536 65536
    mkdir -p dir/sub
    cp --reflink=always a b
    cp --reflink=always a dir/sub/c
    cd ..
    cs_snap reflink_whole_files reflink_whole_files.s "$T1"
}

clone_scenario reflink_within_one_file "xfs_io reflink inside one file: a range cloned past EOF (leaving a hole), a higher range cloned over a lower one, part of an extent cloned into the hole"
clone_sends reflink_within_one_file "reflink_within_one_file.s"
build_reflink_within_one_file() {
    cs_subvol reflink_within_one_file
    cd reflink_within_one_file
    extents a a 131072 131072
    reflink a 0 a 524288 65536
    reflink a 196608 a 65536 65536
    reflink a 131072 a 327680 32768
    cd ..
    cs_snap reflink_within_one_file reflink_within_one_file.s "$T1"
}

clone_scenario reflink_ranges_across_files "xfs_io reflink of ranges between files: into the middle of another file, a range spanning two source extents, a file with a lower inode number getting a range of a higher one, an unaligned own tail"
clone_sends reflink_ranges_across_files "reflink_ranges_across_files.s"
build_reflink_ranges_across_files() {
    cs_subvol reflink_ranges_across_files
    cd reflink_ranges_across_files
    touch z
    extents a a 65536 65536 65536
    extents b b 131072
    reflink a 65536 b 32768 65536
    fill c 0 32768 c
    reflink b 0 c 32768 98304
    fill c 131072 20000 c
    reflink b 98304 z 0 32768
    fill z 32768 4096 z
    cd ..
    cs_snap reflink_ranges_across_files reflink_ranges_across_files.s "$T1"
}

clone_scenario reflink_source_overwritten_and_punched "a one-extent file reflinked whole, then the original overwritten in the middle and punched further on: the copy's clone source changes extent mid-range (clone, write, clone, write, clone)"
clone_sends reflink_source_overwritten_and_punched "reflink_source_overwritten_and_punched.s"
build_reflink_source_overwritten_and_punched() {
    cs_subvol reflink_source_overwritten_and_punched
    cd reflink_source_overwritten_and_punched
    extents a a 262144
    cp --reflink=always a b
    fill a 65536 32768 over
    xfs_io -c fsync a
    fallocate -p -o 163840 -l 16384 a
    cd ..
    cs_snap reflink_source_overwritten_and_punched reflink_source_overwritten_and_punched.s "$T1"
}

clone_scenario dedupe_between_files "xfs_io dedupe: a file written with the same data as a three-extent file deduplicated whole against it, a third deduplicated over part of its range"
clone_sends dedupe_between_files "dedupe_between_files.s"
build_dedupe_between_files() {
    cs_subvol dedupe_between_files
    cd dedupe_between_files
    extents a a 65536 65536 65536
    fill b 0 196608 a
    fill c 0 131072 c
    dd if=a of=c bs=4096 skip=16 seek=8 count=16 conv=notrunc status=none
    sync
    dedupe a 0 b 0 196608
    dedupe a 65536 c 32768 65536
    cd ..
    cs_snap dedupe_between_files dedupe_between_files.s "$T1"
}

clone_scenario compressed_zstd_shared_extents "mount -o compress=zstd: three compressed extents reflinked whole; parts of compressed extents (non-zero data offset, and a range across two extents) reflinked into another file"
CLONE_MOUNT_OPTS[compressed_zstd_shared_extents]=compress=zstd
clone_sends compressed_zstd_shared_extents "compressed_zstd_shared_extents.s"
build_compressed_zstd_shared_extents() {
    cs_subvol compressed_zstd_shared_extents
    cd compressed_zstd_shared_extents
    extents a a 131072 131072 131072
    cp --reflink=always a b
    reflink a 32768 c 0 65536
    reflink a 98304 c 65536 131072
    fill c 196608 40000 c
    cd ..
    cs_snap compressed_zstd_shared_extents compressed_zstd_shared_extents.s "$T1"
}

clone_scenario compressed_lzo_shared_extents "mount -o compress-force=lzo: a file ending inside a compressed extent reflinked whole (the clone ends at both unaligned sizes); part of a compressed extent reflinked into another file"
CLONE_MOUNT_OPTS[compressed_lzo_shared_extents]=compress-force=lzo
clone_sends compressed_lzo_shared_extents "compressed_lzo_shared_extents.s"
build_compressed_lzo_shared_extents() {
    cs_subvol compressed_lzo_shared_extents
    cd compressed_lzo_shared_extents
    fill a 0 300000 a
    xfs_io -c fsync a
    cp --reflink=always a b
    reflink a 135168 c 0 61440
    fill c 61440 10000 c
    cd ..
    cs_snap compressed_lzo_shared_extents compressed_lzo_shared_extents.s "$T1"
}

clone_scenario clone_ends_at_unaligned_eof "unaligned file ends: a file reflinked whole (the clone ends at both i_sizes), a file's EOF block cloned to the end of another, and a range ending at an EOF block lying in the middle of a file that shares the extent (made by a truncate after the clone: the kernel writes the part after the last 64 KiB boundary, fstests 189)"
clone_sends clone_ends_at_unaligned_eof "clone_ends_at_unaligned_eof.s"
build_clone_ends_at_unaligned_eof() {
    cs_subvol clone_ends_at_unaligned_eof
    cd clone_ends_at_unaligned_eof
    fill a 0 200005 a
    xfs_io -c fsync a
    cp --reflink=always a b
    extents e e 65536
    reflink a 196608 e 65536 3397
    extents s s 262144
    extents mid mid 524288
    reflink s 0 mid 65536 131072
    truncate -s 100000 s
    cd ..
    cs_snap clone_ends_at_unaligned_eof clone_ends_at_unaligned_eof.s "$T1"
}

clone_scenario one_sector_clone_from_offset_zero "a one-sector file written with O_DIRECT cloned within itself and to another file (one sector is never cloned from offset 0: the fstests 149 rule), next to one sector cloned from offset 8K and two sectors from offset 0 of a 64 KiB file (both cloned)"
clone_sends one_sector_clone_from_offset_zero "one_sector_clone_from_offset_zero.s"
build_one_sector_clone_from_offset_zero() {
    cs_subvol one_sector_clone_from_offset_zero
    cd one_sector_clone_from_offset_zero
    xfs_io -f -d -c "pwrite -q -S 0xab 0 4096" f
    reflink f 0 f 8192 4096
    reflink f 0 g 0 4096
    xfs_io -f -d -c "pwrite -q -S 0xcd -b 8192 0 8192" \
        -c "pwrite -q -S 0xce -b 4096 8192 4096" \
        -c "pwrite -q -S 0xcf -b 53248 12288 53248" h
    reflink h 8192 k 0 4096
    reflink h 0 k 8192 8192
    cd ..
    cs_snap one_sector_clone_from_offset_zero one_sector_clone_from_offset_zero.s "$T1"
}

clone_scenario btrfs_283_full_best_clone_source "fstests btrfs/283 (a full send): a one-extent file reflinked whole twice, the original's second half overwritten; the second copy must be cloned from the first (the only source covering the whole extent)"
clone_sends btrfs_283_full_best_clone_source "btrfs_283_full_best_clone_source.s"
build_btrfs_283_full_best_clone_source() {
    cs_subvol btrfs_283_full_best_clone_source
    cd btrfs_283_full_best_clone_source
    extents foo foo 131072
    cp --reflink=always foo bar
    cp --reflink=always foo baz
    fill foo 65536 65536 new
    cd ..
    cs_snap btrfs_283_full_best_clone_source btrfs_283_full_best_clone_source.s "$T1"
}

clone_scenario btrfs_130_full_one_extent_many_refs "fstests btrfs/130 (a full send), scaled down: one 8 KiB extent referenced 256 times by one file, the file reflinked whole to three more (1024 references, the kernel's limit for walking them), two more snapshots of the subvolume"
clone_sends btrfs_130_full_one_extent_many_refs "btrfs_130_full_one_extent_many_refs.s1"
build_btrfs_130_full_one_extent_many_refs() {
    local args=() i f
    cs_subvol btrfs_130_full_one_extent_many_refs
    cd btrfs_130_full_one_extent_many_refs
    xfs_io -f -c "pwrite -q -S 0xcd 0 8192" -c fsync foo1
    for ((i = 1; i < 256; i++)); do
        args+=(-c "reflink foo1 0 $((i * 8192)) 8192")
    done
    xfs_io_checked "${args[@]}" foo1
    for f in foo2 foo3 foo4; do cp --reflink=always foo1 "$f"; done
    cd ..
    cs_snap btrfs_130_full_one_extent_many_refs btrfs_130_full_one_extent_many_refs.s1 "$T1"
    cs_snap btrfs_130_full_one_extent_many_refs btrfs_130_full_one_extent_many_refs.s2 "$T1"
    cs_snap btrfs_130_full_one_extent_many_refs btrfs_130_full_one_extent_many_refs.s3 "$T1"
}

# ---------------------------------------------------------------------------
# Incremental sends: the parent and -c sources are clone sources too

clone_scenario parent_file_reflinked_in_child "incremental: a parent's file reflinked whole into a new file, ranges of two parent files into another new file, and a parent extent appended to an existing file by reflink"
clone_sends parent_file_reflinked_in_child "parent_file_reflinked_in_child.s1" "-p parent_file_reflinked_in_child.s1 parent_file_reflinked_in_child.s2"
build_parent_file_reflinked_in_child() {
    local n=parent_file_reflinked_in_child
    cs_subvol $n
    cd $n
    extents a a 65536 65536 65536
    mkdir dir
    extents dir/b b 65536
    cd ..
    cs_snap $n $n.s1 "$T1"
    cd $n
    cp --reflink=always a n
    reflink a 65536 m 0 65536
    reflink dir/b 0 m 65536 65536
    reflink a 0 dir/b 65536 65536
    cd ..
    cs_snap $n $n.s2 "$T2"
}

clone_scenario clone_from_other_subvolume_with_parent "-p P -c OTHER: files of the child reflinked from a read-only snapshot of another subvolume (a whole file, and a range past the end of an existing file)"
clone_sends clone_from_other_subvolume_with_parent \
    "clone_from_other_subvolume_with_parent.xs" \
    "clone_from_other_subvolume_with_parent.s1" \
    "-p clone_from_other_subvolume_with_parent.s1 -c clone_from_other_subvolume_with_parent.xs clone_from_other_subvolume_with_parent.s2"
build_clone_from_other_subvolume_with_parent() {
    local n=clone_from_other_subvolume_with_parent
    cs_subvol $n.x
    extents $n.x/lib lib 65536 65536
    fill $n.x/other 0 20000 other
    cs_snap $n.x $n.xs "$T1"
    cs_subvol $n
    fill $n/main 0 40000 main
    cs_snap $n $n.s1 "$T1"
    cp --reflink=always $n.xs/lib $n/lib-copy
    reflink $n.xs/lib 65536 $n/main 131072 65536
    cs_snap $n $n.s2 "$T2"
}

clone_scenario clone_sources_without_parent "-c A -c B without -p (btrfs-progs picks the parent among the sources): a file reflinked from another subvolume's snapshot; then a file deleted in the parent brought back by reflink from an older sibling snapshot, with three clone sources (the parent picked is the sibling closest in ctransid to their origin)"
clone_sends clone_sources_without_parent \
    "clone_sources_without_parent.xs" \
    "clone_sources_without_parent.s1" \
    "-c clone_sources_without_parent.s1 -c clone_sources_without_parent.xs clone_sources_without_parent.s2" \
    "-c clone_sources_without_parent.s1 -c clone_sources_without_parent.s2 -c clone_sources_without_parent.xs clone_sources_without_parent.s3"
build_clone_sources_without_parent() {
    local n=clone_sources_without_parent
    cs_subvol $n.x
    extents $n.x/lib lib 65536 65536
    cs_snap $n.x $n.xs "$T1"
    cs_subvol $n
    extents $n/old old 65536
    fill $n/keep 0 30000 keep
    cs_snap $n $n.s1 "$T1"
    rm $n/old
    cp --reflink=always $n.xs/lib $n/lib-copy
    cs_snap $n $n.s2 "$T2"
    cp --reflink=always $n.s1/old $n/revived
    reflink $n.s2/lib-copy 0 $n/keep 65536 65536
    cs_snap $n $n.s3 "$T3"
}

clone_scenario btrfs_038_clone_source_compressed_offset "fstests btrfs/038: compress-force=lzo, writes after an unaligned truncate; the child's compressed extents (one split by a later write, so referenced at a non-zero offset) are cloned from the -c source, an identical snapshot"
CLONE_MOUNT_OPTS[btrfs_038_clone_source_compressed_offset]=compress-force=lzo
clone_sends btrfs_038_clone_source_compressed_offset \
    "btrfs_038_clone_source_compressed_offset.s1" \
    "-p btrfs_038_clone_source_compressed_offset.s1 btrfs_038_clone_source_compressed_offset.clones" \
    "-p btrfs_038_clone_source_compressed_offset.s1 -c btrfs_038_clone_source_compressed_offset.clones btrfs_038_clone_source_compressed_offset.s2"
build_btrfs_038_clone_source_compressed_offset() {
    local n=btrfs_038_clone_source_compressed_offset
    cs_subvol $n
    truncate -s 118811 $n/foo
    fill $n/foo 92267 39987 foo
    cs_snap $n $n.s1 "$T1"
    fill $n/foo 200000 80000 w1
    sync
    fill $n/foo 250000 10000 w2
    fill $n/foo 300000 10000 w3
    cs_snap $n $n.clones "$T2"
    cs_snap $n $n.s2 "$T2"
}

clone_scenario btrfs_191_dedupe_into_both_snapshots "fstests btrfs/191: after both snapshots were taken, half of a file of each is deduplicated against a new file of the child (dedupe into read-only snapshots)"
clone_sends btrfs_191_dedupe_into_both_snapshots \
    "btrfs_191_dedupe_into_both_snapshots.s1" \
    "-p btrfs_191_dedupe_into_both_snapshots.s1 btrfs_191_dedupe_into_both_snapshots.s2"
build_btrfs_191_dedupe_into_both_snapshots() {
    local n=btrfs_191_dedupe_into_both_snapshots
    cs_subvol $n
    xfs_io -f -s -c "pwrite -q -S 0xb8 -b 64K 0 512K" $n/foo
    xfs_io -c "pwrite -q -S 0xb8 512K 512K" -c fsync $n/foo
    cs_snap $n $n.s1 "$T1"
    xfs_io -f -c "pwrite -q -S 0xb8 0 1M" -c fsync $n/bar
    cs_snap $n $n.s2 "$T2"
    dedupe $n.s2/bar 0 $n.s1/foo 0 524288
    dedupe $n.s2/bar 524288 $n.s2/foo 524288 524288
}

clone_scenario btrfs_110_clone_source_received_uuid "fstests btrfs/110, 111: a -c source that was itself received (its streams name it by its received uuid, and so must CLONE): a file of the child reflinked from it"
clone_sends btrfs_110_clone_source_received_uuid \
    "btrfs_110_clone_source_received_uuid.r1" \
    "btrfs_110_clone_source_received_uuid.s1" \
    "-p btrfs_110_clone_source_received_uuid.s1 -c btrfs_110_clone_source_received_uuid.r1 btrfs_110_clone_source_received_uuid.s2"
build_btrfs_110_clone_source_received_uuid() {
    local n=btrfs_110_clone_source_received_uuid
    cs_subvol $n.x
    extents $n.x/foo foo 65536 65536
    mkdir $n.orig
    cs_snap $n.x $n.orig/$n.r1 "$T1"
    btrfs -q send $n.orig/$n.r1 | btrfs -q receive .
    cs_subvol $n
    fill $n/main 0 30000 main
    cs_snap $n $n.s1 "$T1"
    cp --reflink=always $n.r1/foo $n/foo-copy
    cs_snap $n $n.s2 "$T2"
}
