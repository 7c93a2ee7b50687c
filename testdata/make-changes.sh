#!/bin/bash
# Regenerate testdata/incremental/changes/: what changed between the
# snapshots of testdata/incremental/image/dev1.img.zst, as computed by the
# independent oracle testdata/changes_oracle.py from the mounted trees (never
# from rsend), for comparison with `rsend --changes -p OLD NEW --json`:
#
#   NAME.jsonl        --old NAME.p --new NAME.c, every scenario of
#                     testdata/incremental/scenarios.sh
#   chain.K.jsonl     --old chain.K-1 --new chain.K, K = 1..5
#   full.NAME.jsonl   --new NAME.c alone (everything "created"), for a few
#                     scenarios (FULL_SCENARIOS below)
#
# Usage: sudo testdata/make-changes.sh
#        sudo ONLY="dir_swap hardlinks_added" KEEP_STAGE=/tmp/x testdata/make-changes.sh
#             (a trial run of some scenarios into KEEP_STAGE or a temporary
#             directory; testdata/incremental/changes/ is left alone)
#
# Needs: root, loop devices, btrfs in the kernel, btrfs-progs (dump-tree),
# python3, zstd, util-linux.  The image is decompressed into a mktemp -d
# directory, attached read-only and mounted read-only (a writable mount would
# clean up the orphan inodes the image keeps); the mount, the loop device and
# the directory are removed on any exit (fixture-lib.sh's trap).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=fixture-lib.sh
source "$HERE/fixture-lib.sh"
fixture_setup make-changes.sh "$HERE/incremental/changes"
INC="$HERE/incremental"
ORACLE="$HERE/changes_oracle.py"
FULL_SCENARIOS=(new_files hardlinks_added names_odd_renamed special_files_replaced)

# shellcheck source=incremental/scenarios.sh
source "$INC/scenarios.sh"
fixture_select SCENARIOS SCENARIO_DOC
CHANGES="$STAGE/changes"
mkdir -p "$CHANGES"

start=$(date +%s)
log "decompress and mount the image read-only"
zstd -q -d --long=27 -c "$INC/image/dev1.img.zst" >"$TMP/dev1.img"
DEV=$(losetup -r -f --show "$TMP/dev1.img")
MNT="$TMP/mnt"
mkdir "$MNT"
mount -o ro "$DEV" "$MNT"
MOUNTS+=("$MNT")

# oracle OUT [OLD] NEW: OUT.jsonl from snapshots OLD (may be empty) and NEW.
oracle() {
    local out=$1 old=$2 new=$3 args=()
    [[ -z $old ]] || { [[ -d $MNT/$old ]] || die "no snapshot $old in the image"; args=(--old "$MNT/$old"); }
    [[ -d $MNT/$new ]] || die "no snapshot $new in the image"
    python3 "$ORACLE" "${args[@]}" --new "$MNT/$new" --device "$DEV" >"$CHANGES/$out.jsonl" ||
        die "the oracle failed on ${old:+$old -> }$new"
}

log "oracle for ${#SELECTED[@]} scenarios"
for n in "${SELECTED[@]}"; do
    oracle "$n" "$n.p" "$n.c"
done
if [[ $FULL_RUN == 1 ]]; then
    log "oracle for the chain and the full listings"
    for k in 1 2 3 4 5; do
        oracle "chain.$k" "chain.$((k - 1))" "chain.$k"
    done
    for n in "${FULL_SCENARIOS[@]}"; do
        oracle "full.$n" "" "$n.c"
    done
fi
total=$(cat "$CHANGES"/*.jsonl | wc -l)
log "$(find "$CHANGES" -name '*.jsonl' | wc -l) files, $total records in $(($(date +%s) - start)) s"

if [[ $FULL_RUN == 0 ]]; then
    if [[ -z ${KEEP_STAGE:-} ]]; then
        for f in "$CHANGES"/*.jsonl; do echo "## $(basename "$f")"; cat "$f"; done
    fi
    log "trial run of ${#SELECTED[@]} scenarios passed; $OUT left alone"
    exit 0
fi

log "replace $OUT"
rm -rf "$OUT"
cp -r "$CHANGES" "$OUT"
log "done: $(du -sh "$OUT" | cut -f1) in $OUT"
