#!/bin/bash
# Regenerate testdata/catalog/ (streams/, manifests/, streams.tsv, README.md):
# a chain of ten nights n01..n10 of one source subvolume, each night's
# changes made by testdata/catalog-chain.py, a read-only snapshot taken and
# sent as a stream file, incremental against the night before, by the
# kernel (`btrfs send`) or by rsend, in protocol v1 or v2 with compressed
# data, as MAKERS below says; manifests of every snapshot
# (testdata/manifest.py --links). crates/receive/tests/catalog_chain.rs
# builds a catalog (`rreceive --catalog`) of the chain and restores from it.
#
# Usage: sudo testdata/make-catalog-chain.sh
#            regenerates testdata/catalog/ on a btrfs of its own (a loop
#            device in a mktemp -d directory, removed on exit, also on
#            failure); before anything is replaced, the chain is received
#            with the real `btrfs receive` onto a second btrfs and every
#            received snapshot must equal its manifest.  KEEP_STAGE=DIR
#            copies the outputs (also of a failed run) to DIR.
#        sudo testdata/make-catalog-chain.sh --on MNT OUT
#            builds the chain on the btrfs mounted at MNT (subvolume MNT/src,
#            snapshots MNT/n01..MNT/n10, left there) and writes the stream
#            files (uncompressed, but n07.stream.zst) and manifests to OUT
#            (created); the filesystem is remounted with compress=zstd and
#            compress=no between nights and left mounted.  For tests, which
#            make and remove the filesystem themselves.
#
# rsend: $RSEND, else target/debug/rsend or target/release/rsend of this
# repository (`cargo build -p rsend`).
# Needs: root, btrfs + loop devices, btrfs-progs >= 6.9.1 (--proto 2
# --compressed-data), python3, zstd, util-linux, coreutils.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
NIGHTS_PY="$HERE/catalog-chain.py"

# night  maker   protocol and flags       (every incremental has -p the night before)
MAKERS=(
    "1  kernel  --proto 1"
    "2  kernel  --proto 2 --compressed-data"
    "3  rsend   --proto 2 --compressed-data"
    "4  kernel  --proto 1"
    "5  kernel  --proto 2 --compressed-data"
    "6  rsend   --proto 1"
    "7  kernel  --proto 1"
    "8  kernel  --proto 2 --compressed-data"
    "9  rsend   --proto 2 --compressed-data"
    "10 kernel  --proto 1 -c n05"
)
# Nights whose changes are written with the filesystem mounted compress=zstd
# (night 1: only docs/); their streams carry ENCODED_WRITEs.
COMPRESSED_NIGHTS=" 2 3 5 8 9 "
# The night whose stream file is compressed with zstd in --on mode (all are
# in testdata/catalog/).
ZSTD_NIGHT=7

snap() { printf 'n%02d' "$1"; }

find_rsend() {
    if [[ -n ${RSEND:-} ]]; then
        echo "$RSEND"
    elif [[ -x $REPO/target/debug/rsend ]]; then
        echo "$REPO/target/debug/rsend"
    elif [[ -x $REPO/target/release/rsend ]]; then
        echo "$REPO/target/release/rsend"
    else
        echo "make-catalog-chain.sh: no rsend: set RSEND or run cargo build -p rsend" >&2
        exit 1
    fi
}

compress_mount() { mount -o "remount,compress=$2" "$1"; }

# build_chain MNT STREAMS MANIFESTS: the source MNT/src, its snapshots
# MNT/n01..n10, their streams STREAMS/nNN.stream and manifests.
build_chain() {
    local mnt=$1 streams=$2 manifests=$3 line n maker flags s parent args
    btrfs -q subvolume create "$mnt/src"
    for line in "${MAKERS[@]}"; do
        read -r n maker flags <<<"$line"
        s=$(snap "$n")
        echo "== $s: changes" >&2
        if [[ $n == 1 ]]; then
            compress_mount "$mnt" no
            python3 "$NIGHTS_PY" 1 "$mnt/src" "$mnt"
            compress_mount "$mnt" zstd:3
            python3 "$NIGHTS_PY" 1z "$mnt/src" "$mnt"
        else
            if [[ $COMPRESSED_NIGHTS == *" $n "* ]]; then
                compress_mount "$mnt" zstd:3
            else
                compress_mount "$mnt" no
            fi
            python3 "$NIGHTS_PY" "$n" "$mnt/src" "$mnt"
        fi
        compress_mount "$mnt" no
        btrfs -q filesystem sync "$mnt"
        btrfs -q subvolume snapshot -r "$mnt/src" "$mnt/$s"
        python3 "$HERE/manifest.py" --links "$mnt/$s" >"$manifests/$s.manifest"
        # shellcheck disable=SC2206
        args=($flags)
        for ((i = 0; i < ${#args[@]}; i++)); do
            [[ ${args[i]} != -c ]] || args[i + 1]="$mnt/${args[i + 1]}"
        done
        if [[ $n != 1 ]]; then
            parent=$(snap $((n - 1)))
            args+=(-p "$mnt/$parent")
        fi
        echo "== $s: $maker send ${args[*]}" >&2
        case $maker in
            kernel) btrfs -q send "${args[@]}" -f "$streams/$s.stream" "$mnt/$s" ;;
            rsend) "$RSEND_BIN" -q "${args[@]}" -f "$streams/$s.stream" "$mnt/$s" ;;
        esac
    done
}

# stream_stats FILE (bytes, bytes cloned, bytes written, command counts),
# and for the regeneration fixture_setup, new_fs, compare and the rest.
# shellcheck source=fixture-lib.sh
source "$HERE/fixture-lib.sh"

count_of() { tr ' ' '\n' <<<"$1" | awk -F= -v c="$2" '$1 == c {print $2; f = 1} END {if (!f) print 0}'; }

# check_streams STREAMS TSV: each v2 --compressed-data stream has
# ENCODED_WRITEs, n10 clones at least the 100 KiB file of n05; writes
# streams.tsv.
check_streams() {
    local streams=$1 tsv=$2 line n maker flags s stats
    echo "# night	maker	flags (incrementals: -p the night before)	bytes	bytes cloned	bytes written	commands" >"$tsv"
    for line in "${MAKERS[@]}"; do
        read -r n maker flags <<<"$line"
        s=$(snap "$n")
        stats=$(stream_stats "$streams/$s.stream")
        printf '%s\t%s\t%s\t%s\n' "$s" "$maker" "$flags" "$stats" >>"$tsv"
        if [[ $flags == *--compressed-data* && $(count_of "$(cut -f4 <<<"$stats")" encoded_write) == 0 ]]; then
            echo "make-catalog-chain.sh: $s ($maker $flags) has no ENCODED_WRITE" >&2
            exit 1
        fi
    done
    if (($(stats_field n10 2 <"$tsv") < 102400)); then
        echo "make-catalog-chain.sh: n10 clones less than 100 KiB (from n05?)" >&2
        exit 1
    fi
}
stats_field() { awk -F'\t' -v s="$1" -v f="$2" '$1 == s {print $(f + 3)}'; }

if [[ ${1:-} == --on ]]; then
    [[ $# -eq 3 ]] || { sed -n '11,24p' "$0" >&2; exit 2; }
    [[ $EUID -eq 0 ]] || { echo "make-catalog-chain.sh: must run as root" >&2; exit 1; }
    export LC_ALL=C TZ=UTC
    umask 022
    MNT=$2
    OUTDIR=$3
    RSEND_BIN=$(find_rsend)
    mkdir -p "$OUTDIR/streams" "$OUTDIR/manifests"
    build_chain "$MNT" "$OUTDIR/streams" "$OUTDIR/manifests"
    check_streams "$OUTDIR/streams" "$OUTDIR/streams.tsv"
    s=$(snap $ZSTD_NIGHT)
    zstd -q --rm -f "$OUTDIR/streams/$s.stream" -o "$OUTDIR/streams/$s.stream.zst"
    exit 0
fi
[[ $# -eq 0 ]] || { sed -n '11,24p' "$0" >&2; exit 2; }

fixture_setup make-catalog-chain.sh "$HERE/catalog"
RSEND_BIN=$(find_rsend)
IMG_SIZE=${IMG_SIZE:-512M}
MOUNT_OPTS=noatime
log "kernel $(uname -r), $(btrfs --version | head -n1), rsend $("$RSEND_BIN" --version)"
new_fs src
start=$(date +%s)
build_chain "$TMP/src" "$RAW" "$STAGE/manifests"
check_streams "$RAW" "$STAGE/streams.tsv"

log "btrfs receive of the chain onto a fresh btrfs, compared with the manifests"
new_fs dst
for ((n = 1; n <= 10; n++)); do
    s=$(snap "$n")
    btrfs receive -q -f "$RAW/$s.stream" "$TMP/dst" || die "btrfs receive of $s.stream failed"
    compare "$s" "$TMP/dst/$s"
done
fixture_no_findings "received snapshots differ from their manifests (see above)"
fixture_write_kernel_findings
elapsed=$(($(date +%s) - start))

log "compress the streams"
for f in "$RAW"/*.stream; do
    zstd -q -19 -T1 -f "$f" -o "$STAGE/streams/$(basename "$f").zst"
done
chmod 644 "$STAGE"/streams/*.zst    # btrfs send makes its files 0600
rmdir "$STAGE/image"

{
    cat <<EOF
# testdata/catalog: a chain of ten nights for the catalog (rreceive --catalog)

Generated by \`testdata/make-catalog-chain.sh\` from \`testdata/catalog-chain.py\` (what each
night changes) -- do not edit by hand. Regenerate with

    cargo build -p rsend && sudo testdata/make-catalog-chain.sh

Needs root, loop devices, btrfs in the kernel, btrfs-progs >= 6.9.1, python3, zstd. Runtime:
about $elapsed s. Generated with kernel \`$(uname -r)\`, \`$(btrfs --version | head -n1)\`,
\`$("$RSEND_BIN" --version)\`.

## How it is made

One btrfs (\`mkfs.btrfs ${MKFS_ARGS[*]}\` on a $IMG_SIZE sparse file, mounted $MOUNT_OPTS), a
subvolume \`src\`; for each night 1..10: \`catalog-chain.py NIGHT\` changes \`src\` (its top
comment says how), \`btrfs filesystem sync\`, a read-only snapshot \`nNN\` at the top level,
its manifest (\`manifest.py --links\`: every path's type, mode, owner, size, times, sha256,
symlink target, rdev, xattrs, and the hard-link groups), and its stream file, every
incremental with \`-p\` the night before:

| night | made by | flags |
|---|---|---|
EOF
    for line in "${MAKERS[@]}"; do
        read -r n maker flags <<<"$line"
        printf '| %s | %s | `%s` |\n' "$(snap "$n")" \
            "$([[ $maker == kernel ]] && echo '`btrfs send`' || echo '`rsend` (mounted paths)')" "$flags"
    done
    cat <<EOF

The changes of nights 2, 3, 5, 8 and 9 (and docs/ of night 1) are written with the filesystem
mounted \`compress=zstd:3\` (else \`compress=no\`), so the \`--compressed-data\` streams carry
ENCODED_WRITEs. Night 10 reflinks a file of n05 that the source deleted on night 6, and is
sent with \`-c n05\`: it clones from n05, two nights back.

Before this directory was replaced, the ten streams were received in order with \`btrfs
receive\` onto a second btrfs and each received snapshot equalled its manifest
(\`kernel-findings.tsv\`: what that receive got wrong and was let pass, as in
testdata/incremental).

## Files

- \`streams/nNN.stream.zst\`: the stream files, \`zstd -19\` (no \`--long\`: any zstd
  decoder reads them).
- \`manifests/nNN.manifest\`: the snapshots (format: testdata/manifest.py).
- \`streams.tsv\`: per night its maker, flags, bytes, bytes cloned, bytes of WRITE data and
  the command counts (of the uncompressed stream).
- \`kernel-findings.tsv\`.

EOF
    echo "Total size: $(du -sb "$STAGE" | cut -f1 | numfmt --to=iec --suffix=B) (streams $(du -cb "$STAGE"/streams/* | tail -n1 | cut -f1 | numfmt --to=iec --suffix=B))."
} >"$STAGE/README.md"

log "replace $OUT"
mkdir -p "$OUT"
rm -rf "$OUT/streams" "$OUT/manifests" "$OUT/streams.tsv" "$OUT/kernel-findings.tsv" "$OUT/README.md"
cp -r "$STAGE/streams" "$STAGE/manifests" "$STAGE/streams.tsv" "$STAGE/kernel-findings.tsv" "$STAGE/README.md" "$OUT/"
log "done: $(du -sh "$OUT" | cut -f1) in $OUT"
