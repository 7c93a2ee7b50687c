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

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=fixture-lib.sh
source "$HERE/fixture-lib.sh"
fixture_setup make-clone.sh "$HERE/clone"
IMG_SIZE=${IMG_SIZE:-256M}
MOUNT_OPTS=noatime

# shellcheck source=clone/scenarios.sh
source "$OUT/scenarios.sh"

fixture_select CLONE_SCENARIOS CLONE_DOC
for n in "${SELECTED[@]}"; do
    [[ -n ${CLONE_SENDS[$n]:-} ]] || die "scenario $n declares no sends"
done

# The snapshot a send sends: its last word.
send_snap() { local w; read -r -a w <<<"$1"; echo "${w[-1]}"; }

# Every snapshot a send names (-p, -c and the one sent).
send_snaps() { local w; read -r -a w <<<"$1"; printf '%s\n' "${w[@]}" | grep -v '^-'; }

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
        TSV_ROWS+=("$n	$k	$send	$parent	$(stream_stats "$f")")
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
fixture_no_findings "receives failed or differ from their snapshots (see above)"

log "kernel.tsv, kernel-findings.tsv"
{
    echo "# scenario	send	args	parent	bytes	clone_bytes	write_bytes	commands"
    printf '%s\n' "${TSV_ROWS[@]}"
} >"$STAGE/kernel.tsv"
fixture_write_kernel_findings
fixture_compress_streams

log "unmount, check and compress the image"
umount "$SRC"
losetup -d "$SRC_DEV"
cp --sparse=always "$TMP/src.img" "$TMP/image.img"
fixture_image "$TMP/image.img" image
fixture_write_info "state=unmounted cleanly"

if [[ $FULL_RUN == 0 ]]; then
    log "trial run of ${#SELECTED[@]} scenarios passed; testdata/clone left alone"
    column -t -s $'\t' "$STAGE/kernel.tsv" >&2
    exit 0
fi

log "README.md"
{
    fixture_readme_head "clone scenarios made by the real kernel" xfsprogs "about a minute"
    cat <<EOF

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
    fixture_readme_total
} >"$STAGE/README.md"

fixture_replace
