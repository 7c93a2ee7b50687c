#!/bin/bash
# Regenerate testdata/v2/ (all but scenarios.sh and make-verity.py, which
# are the sources):
#
# - image/dev1.img.zst: one btrfs image made by the real kernel holding
#   every scenario of testdata/v2/scenarios.sh (subvolume NAME, read-only
#   snapshots NAME.p and NAME.c), with the kernel's streams of each
#   (`btrfs send` of NAME.p and `-p NAME.p NAME.c`, as `--proto 2
#   --compressed-data`, `--no-data` and `--proto 2 --no-data`), manifests and
#   flag lists of every snapshot, kernel.tsv;
# - image/lzo-SECTOR.img.zst for SECTOR 8k, 16k, 32k and 64k: LZO
#   compressed trees made by `mkfs.btrfs --rootdir --compress lzo -s
#   SECTOR` (the kernel here mounts only 4 KiB sectors), read-only
#   subvolumes a and b, manifests of their source trees;
# - image/verity.img.zst and verity.tsv: fs-verity turned on by hand
#   (make-verity.py) for two files of snapshot verity.c (verity.p is the
#   same tree without it), and what ENABLE_VERITY must carry for them.
#
# Usage: sudo testdata/make-v2.sh
#        sudo ONLY="prealloc chattr_flags" testdata/make-v2.sh
#             (a trial run of some scenarios; testdata/v2 is left alone,
#             KEEP_STAGE=DIR keeps what it made)
#
# Needs: root, btrfs + loop devices, btrfs-progs >= 6.13 (mkfs --compress),
# python3, zstd, xfsprogs (xfs_io), e2fsprogs (chattr), util-linux.
#
# Before anything is replaced, the kernel's `--proto 2 --compressed-data`
# streams of every scenario are received in order with the real `btrfs
# receive` onto a second btrfs, with and without --force-decompress, and
# each received snapshot must equal its manifest.  Everything happens in a
# mktemp -d directory whose mounts and loop devices are removed on exit,
# also on failure.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=fixture-lib.sh
source "$HERE/fixture-lib.sh"
fixture_setup make-v2.sh "$HERE/v2"
IMG_SIZE=${IMG_SIZE:-256M}
MOUNT_OPTS=noatime

# shellcheck source=v2/scenarios.sh
source "$OUT/scenarios.sh"

fixture_select V2_SCENARIOS V2_DOC

# Each send of a scenario: FLAVOR (stream file part) and btrfs send's flags.
FLAVORS=(v2c nd1 nd2)
declare -A FLAVOR_ARGS=([v2c]="--proto 2 --compressed-data" [nd1]="--no-data" [nd2]="--proto 2 --no-data")

log "kernel $(uname -r), $(btrfs --version | head -n1)"
new_fs src
SRC_DEV=$NEW_DEV
SRC="$TMP/src"

log "building ${#SELECTED[@]} scenarios"
for n in "${SELECTED[@]}"; do
    opts=${V2_MOUNT_OPTS[$n]}
    [[ -z $opts ]] || mount -o "remount,$opts" "$SRC"
    log "build_$n"
    (
        cd "$SRC"
        "build_$n"
    )
    btrfs filesystem sync "$SRC" >/dev/null
    [[ -z $opts ]] || mount -o remount,compress=no "$SRC"
done
btrfs filesystem sync "$SRC" >/dev/null
btrfs subvolume list -p -u -q -R "$SRC" >"$STAGE/image/subvolumes.txt"

log "kernel streams, manifests and flags"
TSV_ROWS=()
for n in "${SELECTED[@]}"; do
    for fl in "${FLAVORS[@]}"; do
        # shellcheck disable=SC2206
        args=(${FLAVOR_ARGS[$fl]})
        btrfs -q send "${args[@]}" -f "$RAW/$n.$fl.full.stream" "$SRC/$n.p"
        btrfs -q send "${args[@]}" -f "$RAW/$n.$fl.incr.stream" -p "$SRC/$n.p" "$SRC/$n.c"
        for k in full incr; do
            TSV_ROWS+=("$n	$fl	$k	$(stream_stats "$RAW/$n.$fl.$k.stream" | cut -f1,4)")
        done
    done
    for s in "$n.p" "$n.c"; do
        python3 "$MANIFEST_PY" --links "$SRC/$s" >"$STAGE/manifests/$s.manifest"
        flags_of "$SRC/$s" >"$STAGE/manifests/$s.flags"
    done
done

log "btrfs receive of the --compressed-data streams, compared with the manifests"
new_fs dst
DST="$TMP/dst"
for n in "${SELECTED[@]}"; do
    for how in as-sent force-decompress; do
        extra=()
        [[ $how == as-sent ]] || extra=(--force-decompress)
        mkdir -p "$DST/$how/$n"
        for k in full incr; do
            btrfs receive -q "${extra[@]}" -f "$RAW/$n.v2c.$k.stream" "$DST/$how/$n" ||
                { FINDINGS+=("$n: btrfs receive $how of $n.v2c.$k.stream failed"); continue 2; }
        done
        compare "$n.p" "$DST/$how/$n/$n.p"
        compare "$n.c" "$DST/$how/$n/$n.c"
    done
done
fixture_no_findings "receives failed or differ from their snapshots (see above)"
{
    echo "# scenario	flavor	send	bytes	commands (flavor: v2c --proto 2 --compressed-data, nd1 --no-data, nd2 --proto 2 --no-data; send: full of NAME.p, incr -p NAME.p NAME.c)"
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

# lzo_tree DIR TAG: the source tree of one LZO subvolume: compressible
# files of several sizes (one written over the 128 KiB extent limit), a
# small one (inline at 4 KiB sectors, a one-sector extent at larger ones),
# incompressible data, a directory, a hard link, a symlink, an xattr.
lzo_tree() {
    mkdir -p "$1/dir"
    fill "$1/big" 0 400000 "$2big"
    fill "$1/mid" 0 70000 "$2mid"
    fill "$1/small" 0 1500 "$2small"
    random "$1/noise" 0 100000
    fill "$1/dir/inner" 0 200000 "$2inner"
    ln "$1/mid" "$1/dir/mid.link"
    ln -s ../big "$1/dir/big.sym"
    setfattr -n user.tag -v "$2" "$1/big"
    find "$1" -exec touch -h -d "$T_LZO" {} +
}
# mkfs.btrfs --rootdir keeps whole seconds only.
T_LZO="2021-01-02 03:04:05 UTC"
T_LZO2="2022-02-03 04:05:06 UTC"

log "LZO images at 8, 16, 32 and 64 KiB sectors (mkfs.btrfs --rootdir)"
# The trees are made on a noatime tmpfs, so reading them (the manifests,
# mkfs) leaves their atimes alone.
mkdir "$TMP/lzo-src"
mount -t tmpfs -o noatime,size=64m tmpfs "$TMP/lzo-src"
MOUNTS+=("$TMP/lzo-src")
for sector in 8k 16k 32k 64k; do
    tree="$TMP/lzo-src/$sector"
    mkdir -p "$tree"
    lzo_tree "$tree/a" "a$sector"
    lzo_tree "$tree/b" "b$sector"
    fill "$tree/b/big" 131072 4096 "b$sector-over"
    rm "$tree/b/mid"
    fill "$tree/b/new" 0 90000 "b$sector-new"
    find "$tree/b" -newermt "$T_LZO" -exec touch -h -d "$T_LZO2" {} +
    truncate -s 128M "$TMP/lzo-$sector.img"
    mkfs.btrfs -q -f -s "$sector" --rootdir "$tree" -u ro:a -u ro:b --compress lzo \
        "$TMP/lzo-$sector.img" >/dev/null 2>&1 || die "mkfs.btrfs -s $sector --rootdir failed"
    btrfs check --readonly --check-data-csum "$TMP/lzo-$sector.img" >"$TMP/check.log" 2>&1 ||
        { cat "$TMP/check.log" >&2; die "btrfs check of lzo-$sector.img failed"; }
    for s in a b; do
        python3 "$MANIFEST_PY" --links "$tree/$s" >"$STAGE/manifests/lzo-$sector.$s.manifest"
    done
    zstd -q -19 --long -T1 -f "$TMP/lzo-$sector.img" -o "$STAGE/image/lzo-$sector.img.zst"
    rm -rf "$tree" "$TMP/lzo-$sector.img"
done

log "fs-verity image (items written by make-verity.py)"
truncate -s 128M "$TMP/verity.img"
mkfs.btrfs -q -f -m single "$TMP/verity.img" >/dev/null
VDEV=$(losetup --find --show "$TMP/verity.img")
mkdir "$TMP/verity"
mount -o "$MOUNT_OPTS" "$VDEV" "$TMP/verity"
MOUNTS+=("$TMP/verity")
(
    cd "$TMP/verity"
    btrfs -q subvolume create verity
    fill verity/small 0 3000 small
    : >verity/empty
    fill verity/plain 0 5000 plain
    v2_snap verity p "$T1"
    btrfs -q subvolume snapshot -r verity verity.c
    python3 "$MANIFEST_PY" --links verity.c >"$STAGE/manifests/verity.c.manifest"
)
VID=$(btrfs inspect-internal rootid "$TMP/verity/verity.c")
SMALL=$(stat -c %i "$TMP/verity/verity.c/small")
EMPTY=$(stat -c %i "$TMP/verity/verity.c/empty")
umount "$TMP/verity"
losetup -d "$VDEV"
python3 "$OUT/make-verity.py" "$TMP/verity.img" "$VID" \
    "$SMALL:small:1:12:$(printf 'rsend salt' | od -An -tx1 | tr -d ' \n'):" \
    "$EMPTY:empty:2:12::" >"$STAGE/verity.tsv"
btrfs check --readonly --check-data-csum "$TMP/verity.img" >"$TMP/check.log" 2>&1 ||
    { cat "$TMP/check.log" >&2; die "btrfs check of verity.img failed"; }
zstd -q -19 --long -T1 -f "$TMP/verity.img" -o "$STAGE/image/verity.img.zst"

if [[ $FULL_RUN == 0 ]]; then
    log "trial run of ${#SELECTED[@]} scenarios passed; testdata/v2 left alone"
    column -t -s $'\t' "$STAGE/kernel.tsv" >&2
    exit 0
fi

log "README.md"
{
    fixture_readme_head "protocol v2 scenarios made by the real kernel" "xfsprogs, e2fsprogs, attr" "about a minute"
    cat <<EOF

## How it is made

\`scenarios.sh\` defines each scenario as \`build_NAME\` (run at the top level of one
filesystem: \`mkfs.btrfs ${MKFS_ARGS[*]}\` on a $IMG_SIZE sparse file, mounted \`$MOUNT_OPTS\`
plus the scenario's options, such as \`compress-force=zstd:3\`, while it builds). It makes
subvolume \`NAME\` and read-only snapshots \`NAME.p\` and \`NAME.c\` whose entries have fixed
times (\`T1\`, \`T2\`), so the manifests are the same on every run; uuids, generations,
extent addresses and so the streams are not.

The kernel cannot mount other sector sizes here, so LZO with 8 to 64 KiB sectors comes from
\`mkfs.btrfs --rootdir DIR --compress lzo -s SECTOR -u ro:a -u ro:b\`: two unrelated
read-only subvolumes (b is a with changes), so an incremental send of b against a is
possible but shares nothing. The kernel here has no fs-verity either, so \`make-verity.py\`
writes the verity items of two files into the unmounted image the way fs/btrfs/verity.c
does (see its docstring); no kernel has read them.

Before anything was replaced, every scenario's \`--compressed-data\` streams were received
in order with \`btrfs receive\`, with and without \`--force-decompress\`, onto a second btrfs,
and every received snapshot matched its manifest, hard-link groups included (\`btrfs
receive\` ignores FILEATTR, so flags are not compared there).

## Layout

- \`image/dev1.img.zst\` -- the kernel's filesystem, unmounted cleanly, passed \`btrfs check
  --readonly --check-data-csum\`; \`image/INFO\`, \`image/subvolumes.txt\`.
- \`image/lzo-{8k,16k,32k,64k}.img.zst\` -- the mkfs-made LZO images (checked the same way).
- \`image/verity.img.zst\`, \`verity.tsv\` -- the fs-verity image and, per file: path,
  inode, algorithm, block size, salt, signature and descriptor (hex).
- \`manifests/SNAP.manifest\` (\`testdata/manifest.py --links\`) and \`manifests/SNAP.flags\`
  (hex path, FS_IOC_GETFLAGS) of every snapshot; \`lzo-SECTOR.{a,b}.manifest\` of the LZO
  source trees; \`verity.c.manifest\`.
- \`streams/NAME.FLAVOR.{full,incr}.stream.zst\` -- the kernel's streams: FLAVOR \`v2c\` is
  \`--proto 2 --compressed-data\`, \`nd1\` \`--no-data\`, \`nd2\` \`--proto 2 --no-data\`;
  \`full\` sends NAME.p, \`incr\` \`-p NAME.p NAME.c\`.
- \`kernel.tsv\` -- bytes and command counts of every kernel stream.

## Used by

- \`crates/send/tests/v2_fixtures.rs\` (no root): rsend's streams of every send against the
  kernel's (byte-identical or no larger; \`--no-data\` identical); rsend's \`--compressed-data\`
  streams replayed in memory give every manifest, also from the LZO and verity images;
  ENABLE_VERITY carries what verity.tsv says.
- \`crates/send/tests/v2_kernel.rs\` (root): rsend's streams received by \`btrfs receive\`
  with and without \`--force-decompress\` and by rreceive onto ext4 and btrfs, against the
  manifests (and the flags, where the receiver keeps them).

## Scenarios

| scenario | covers | kernel v2c full / incr bytes |
|---|---|---|
EOF
    for n in "${SELECTED[@]}"; do
        awk -F'\t' -v n="$n" -v doc="${V2_DOC[$n]}" '
            $1 == n && $2 == "v2c" { b = b (b == "" ? "" : " / ") $4 }
            END { printf "| `%s` | %s | %s |\n", n, doc, b }' "$STAGE/kernel.tsv"
    done
    echo
    fixture_readme_total
} >"$STAGE/README.md"

log "replace $OUT"
rm -rf "$OUT/image" "$OUT/streams" "$OUT/manifests" "$OUT/kernel.tsv" "$OUT/kernel-findings.tsv" "$OUT/verity.tsv" "$OUT/README.md"
cp -r "$STAGE/image" "$STAGE/streams" "$STAGE/manifests" "$STAGE/kernel.tsv" "$STAGE/kernel-findings.tsv" "$STAGE/verity.tsv" "$STAGE/README.md" "$OUT/"
log "done: $(du -sh "$OUT" | cut -f1) in $OUT"
