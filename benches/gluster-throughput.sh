#!/usr/bin/env bash
# Throughput onto GlusterFS: the /usr-copy stream received with rreceive
# onto a fresh one-brick volume (brick on a loop xfs, mounted with FUSE and
# -o acl), against `cp -a` of the same tree onto the same volume.
#
#   sudo benches/gluster-throughput.sh            # SRC=/usr
#   sudo SRC=/usr/share/doc benches/gluster-throughput.sh
#
# The tree is copied into a btrfs subvolume (image cached per SRC under
# IMG_DIR, default /var/tmp/rsend-bench), sent to a stream file with rsend,
# then each side gets a fresh directory on the volume, with the page cache
# dropped before each run. Prints both times and their ratio (goal: at most
# 1.2). `RREC_ARGS` adds rreceive options (e.g. --no-durable).
set -euo pipefail
BENCH=gluster-throughput.sh
# shellcheck source=benches/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SRC=${SRC:-/usr}
IMG_DIR=${IMG_DIR:-/var/tmp/rsend-bench}
need_pkg glusterd glusterfs-server
need_pkg mkfs.xfs xfsprogs
build_rsend
cargo_release rreceive
RRECEIVE=$TARGET_DIR/release/rreceive
scratch_dir gluster
mkdir -p "$IMG_DIR"
tag=$(echo "$SRC" | tr '/' '_')
size=$(( $(du -sxm "$SRC" | cut -f1) * 2 + 1024 ))
img="$IMG_DIR/usrcopy$tag.img"
gen() { btrfs -q subvolume create "$1/vol"; cp -a "$SRC/." "$1/vol/"; sync;
        btrfs -q subvolume snapshot -r "$1/vol" "$1/usr"; }
mkdir -p "$TMP/build" "$TMP/src"
build_cached_image "$img" "${size}M" "$TMP/build" gen
log "stream of $SRC"
"$RSEND" -q -d "$img" -f "$TMP/usr.stream" usr
stream_mib=$(( $(stat -c %s "$TMP/usr.stream") >> 20 ))

# The brick: a loop xfs big enough for two copies. The volume, its mount
# and the brick are undone by gluster_cleanup (in that order), not by the
# scratch cleanup, which would unmount the brick under the running volume.
truncate -s "$(( size * 2 + 2048 ))M" "$TMP/brick.img"
mkfs.xfs -q -f "$TMP/brick.img"
mkdir -p "$TMP/brick" "$TMP/mnt"
BRICK_LOOP=$(losetup --find --show "$TMP/brick.img")
mount -o noatime "$BRICK_LOOP" "$TMP/brick"
vol="rsendbench$$"
host=$(hostname)
gluster_cleanup() {
    umount "$TMP/mnt" 2>/dev/null || umount -l "$TMP/mnt" 2>/dev/null
    gluster --mode=script volume stop "$vol" force >/dev/null 2>&1
    gluster --mode=script volume delete "$vol" >/dev/null 2>&1
    umount "$TMP/brick" 2>/dev/null || umount -l "$TMP/brick"
    losetup -d "$BRICK_LOOP"
    if [[ -n ${STARTED_GLUSTERD:-} ]]; then
        log "glusterd was started by this script and is left running"
    fi
}
CLEANUP_HOOK=gluster_cleanup
pgrep -x glusterd >/dev/null || { glusterd; STARTED_GLUSTERD=1; sleep 2; }
gluster --mode=script volume create "$vol" "$host:$TMP/brick/b" force >/dev/null
# Volumes allow 100 links to a file by default; /usr has more (git).
gluster --mode=script volume set "$vol" storage.max-hardlinks 100000 >/dev/null
gluster --mode=script volume start "$vol" >/dev/null
mount -t glusterfs -o acl "$host:/$vol" "$TMP/mnt"

# The tree cp -a reads: the snapshot, loop-mounted read-only.
loop_mount "$img" "$TMP/src" ro

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
t() { local t0=$EPOCHREALTIME; "$@"; awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

mkdir "$TMP/mnt/rr" "$TMP/mnt/cp"
drop
log "rreceive onto $vol"
# shellcheck disable=SC2086
rr=$(t "$RRECEIVE" -q ${RREC_ARGS:-} -f "$TMP/usr.stream" "$TMP/mnt/rr")
drop
log "cp -a onto $vol"
cp_t=$(t cp -a "$TMP/src/usr" "$TMP/mnt/cp/usr")
files=$(find "$TMP/src/usr" | wc -l)
echo "tree $SRC: $files entries, stream $stream_mib MiB"
echo "rreceive ${RREC_ARGS:-}: ${rr}s"
echo "cp -a: ${cp_t}s"
awk -v a="$rr" -v b="$cp_t" 'BEGIN { printf "ratio rreceive / cp -a: %.2f (goal <= 1.2)\n", a / b }'
machine_line
