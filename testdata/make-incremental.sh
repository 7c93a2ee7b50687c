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

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=fixture-lib.sh
source "$HERE/fixture-lib.sh"
fixture_setup make-incremental.sh "$HERE/incremental"
IMG_SIZE=${IMG_SIZE:-512M}
mkdir -p "$TMP/notes"
# Files held open by the scenarios (scenarios.sh) are let go on exit.
FIXTURE_BEFORE_CLEANUP=release_held

# shellcheck source=incremental/scenarios.sh
source "$OUT/scenarios.sh"

fixture_select SCENARIOS SCENARIO_DOC
MOUNT_OPTS=$SCENARIO_MOUNT_OPTS

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
fixture_no_findings "received trees differ from their snapshots (see above)"

log "kernel.tsv, kernel-findings.tsv"
fixture_write_kernel_findings
{
    echo "# stream	bytes	commands (counts of the first stream, from its headers)"
    for f in "$RAW"/*.stream; do
        printf '%s\t%s\n' "$(basename "$f" .stream)" "$(stream_stats "$f" | cut -f1,4)"
    done
} >"$STAGE/kernel.tsv"

fixture_compress_streams

log "copy the image (frozen, the held files still open), check and compress it"
scenario_image_copy "$SRC" "$TMP/src.img" "$TMP/image.img"
umount "$SRC"
losetup -d "$SRC_DEV"
fixture_image "$TMP/image.img" copy no-log-tree
fixture_write_info "state=copied while frozen (fsfreeze), not unmounted: read-only snapshots keep inodes with no links and orphan items" \
    "log_root=$LOGROOT"

if [[ $FULL_RUN == 0 ]]; then
    log "trial run of ${#SELECTED[@]} scenarios passed; testdata/incremental left alone"
    exit 0
fi

log "README.md"
stat_of() { awk -F'\t' -v s="$1" '$1 == s {print $2}' "$STAGE/kernel.tsv"; }
count_of() {
    awk -F'\t' -v s="$1" -v c="$2" '$1 == s { n = split($3, a, " "); for (i = 1; i <= n; i++) { split(a[i], kv, "="); if (kv[1] == c) { print kv[2]; exit } } print 0 }' "$STAGE/kernel.tsv"
}
{
    fixture_readme_head "incremental-send scenarios made by the real kernel" \
        "xfsprogs, attr, acl, libcap2-bin, e2fsprogs" "about three minutes"
    cat <<EOF

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
    fixture_readme_total
    # The section make-changes.sh's listings are described in (changes/ is
    # kept: it is that script's, and must be remade after a new image).
    sed -n '/^## changes\//,$p' "$OUT/README.md" 2>/dev/null || true
} >"$STAGE/README.md"

fixture_replace
