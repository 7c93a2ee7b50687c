# shellcheck shell=bash
# Shared set-up for the benchmark scripts; source it, do not run it.
#
#   BENCH=name.sh; . "$(dirname "${BASH_SOURCE[0]}")/common.sh"
#
# Gives: REPO, root check, LC_ALL=C, umask 022, log/die, need_pkg,
# build_rsend and build_rdump (set RSEND / RDUMP; honour CARGO_TARGET_DIR),
# maxrss, machine_line, time_pairs (the alternating A B A B timer), and a
# scratch directory TMP (mktemp -d under TMPDIR) whose mounts and loop
# devices are undone on any exit: call scratch_dir, then register mount
# points with `scratch_mount MNT` and images with `scratch_image IMG`
# (every loop device of a registered image is detached). loop_mount and
# loop_umount attach and mount an image (registering both),
# build_cached_image makes an image once through a loop mount and keeps it,
# warm_cache reads a sparse file's data into the page cache,
# smalltree_image builds (once, cached under IMG_DIR) the btrfs image of
# benches/smalltree.py with snapshots s0 and s1.
# A script may set CLEANUP_HOOK to a function run on exit after the
# unmounts and detaches, before TMP is removed.

[[ -n ${BENCH:-} ]] || { echo "common.sh: set BENCH before sourcing" >&2; exit 1; }

if [[ $EUID -ne 0 ]]; then
    echo "$BENCH: must run as root (sudo benches/$BENCH)" >&2
    exit 1
fi
export LC_ALL=C
umask 022

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

log() { echo "== $*" >&2; }
die() { echo "$BENCH: ERROR: $*" >&2; exit 1; }

need_pkg() { # need_pkg COMMAND PACKAGE
    if ! command -v "$1" >/dev/null 2>&1 && [[ ! -x $1 ]]; then
        log "installing $2"
        apt-get install -y -q "$2" >/dev/null ||
            { apt-get update -q >/dev/null && apt-get install -y -q "$2" >/dev/null; } ||
            die "cannot install $2"
    fi
}

# cargo_release PACKAGE: cargo build --release -p PACKAGE as the invoking
# user (so target/ does not become root-owned); sets TARGET_DIR.
cargo_release() {
    local pkg=$1
    TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
    log "building $pkg (release)"
    if [[ -n ${SUDO_USER:-} && $SUDO_USER != root ]]; then
        sudo -u "$SUDO_USER" -H bash -lc \
            "cd '$REPO' && ${CARGO_TARGET_DIR:+CARGO_TARGET_DIR='$CARGO_TARGET_DIR'} cargo build --release -p $pkg" >&2
    else
        (cd "$REPO" && cargo build --release -p "$pkg") >&2
    fi
}

# build_rsend [PACKAGE]: cargo build --release -p PACKAGE (default rsend);
# sets RSEND.
build_rsend() {
    cargo_release "${1:-rsend}"
    RSEND="$TARGET_DIR/release/rsend"
    [[ -x $RSEND ]] || die "$RSEND was not built"
}

# build_rdump: builds rdump (package rdump); sets RDUMP.
build_rdump() {
    cargo_release rdump
    RDUMP="$TARGET_DIR/release/rdump"
    [[ -x $RDUMP ]] || die "$RDUMP was not built"
}

# maxrss FILE: "Maximum resident set size" (KiB) from a /usr/bin/time -v report
maxrss() { awk -F': ' '/Maximum resident set size/ { print $2 }' "$1"; }

machine_line() {
    echo "nproc $(nproc); $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo); kernel $(uname -r); $(btrfs --version | head -1)"
}

SCRATCH_MOUNTS=()
SCRATCH_IMAGES=()
CLEANUP_HOOK=
TMP=
scratch_mount() { SCRATCH_MOUNTS+=("$1"); }
scratch_image() { SCRATCH_IMAGES+=("$1"); }

_scratch_cleanup() {
    local rc=$? m img dev
    set +e
    cd /
    for m in "${SCRATCH_MOUNTS[@]}"; do
        if mountpoint -q "$m" 2>/dev/null; then
            umount "$m" || { sleep 1; umount "$m"; } || umount -l "$m"
        fi
    done
    for img in "${SCRATCH_IMAGES[@]}"; do
        for dev in $(losetup -n -O NAME -j "$img" 2>/dev/null); do
            losetup -d "$dev"
        done
    done
    _drop_partial
    [[ -n $CLEANUP_HOOK ]] && "$CLEANUP_HOOK"
    if [[ -n $TMP && -d $TMP ]]; then
        if grep -qF " $TMP/" /proc/self/mounts; then
            echo "$BENCH: WARNING: something is still mounted under $TMP, not removing it" >&2
        else
            rm -rf "$TMP"
        fi
    fi
    [[ $rc -ne 0 ]] && echo "$BENCH: FAILED (exit $rc)" >&2
    exit "$rc"
}

scratch_dir() { # scratch_dir PREFIX: sets TMP
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
    trap _scratch_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# loop_mount IMG MNT [ro]: attach IMG (read-only with "ro") and mount it on
# MNT (-o ro, or -o noatime); both registered for cleanup. Sets LOOP.
loop_mount() {
    local img=$1 mnt=$2 mode=${3:-rw}
    scratch_image "$img"
    scratch_mount "$mnt"
    if [[ $mode == ro ]]; then
        LOOP=$(losetup -r --find --show "$img")
        mount -o ro "$LOOP" "$mnt"
    else
        LOOP=$(losetup --find --show "$img")
        mount -o noatime "$LOOP" "$mnt"
    fi
}

# loop_umount MNT: unmount MNT and detach its loop device.
loop_umount() {
    local dev
    dev=$(findmnt -n -o SOURCE --mountpoint "$1")
    umount "$1"
    losetup -d "$dev"
}

# build_cached_image IMG SIZE MNT BUILDER [ARGS...]: unless IMG exists (or
# REBUILD is set), mkfs.btrfs a sparse SIZE image as IMG.partial, mount it on
# MNT, run `BUILDER MNT ARGS...`, unmount and rename it to IMG. A failed
# build leaves no IMG behind. Sets BUILD_SECONDS (wall time from mkfs to
# the image on disk; 0 when cached).
_PARTIAL=
_drop_partial() { if [[ -n $_PARTIAL ]]; then rm -f "$_PARTIAL"; fi; }
build_cached_image() {
    local img=$1 size=$2 mnt=$3 t0
    shift 3
    BUILD_SECONDS=0
    if [[ -f $img && -z ${REBUILD:-} ]]; then
        log "cached image $img"
        return
    fi
    _PARTIAL="$img.partial"
    t0=$EPOCHREALTIME
    rm -f "$_PARTIAL"
    truncate -s "$size" "$_PARTIAL"
    mkfs.btrfs -q -f "$_PARTIAL" >/dev/null
    loop_mount "$_PARTIAL" "$mnt"
    "$@" "$mnt"
    btrfs filesystem sync "$mnt"
    btrfs filesystem df "$mnt" | sed 's/^/   /' >&2
    loop_umount "$mnt"
    sync "$_PARTIAL" # this file only: a global sync waits for every other writer
    rm -f "$img"
    mv "$_PARTIAL" "$img"
    _PARTIAL=
    # shellcheck disable=SC2034 # read by the caller
    BUILD_SECONDS=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
}

# warm_cache FILE: read FILE's data into the page cache, skipping holes
# (a sparse image's holes cost nothing to skip and seconds to read).
warm_cache() {
    python3 - "$1" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
off, end = 0, os.fstat(fd).st_size
while off < end:
    try:
        data = os.lseek(fd, off, os.SEEK_DATA)
    except OSError:  # ENXIO: only a hole is left
        break
    hole = os.lseek(fd, data, os.SEEK_HOLE)
    while data < hole:
        data += len(os.pread(fd, min(8 << 20, hole - data), data))
    off = hole
PY
}

# time_pairs RUNS WARMUP OUT.json NAME1 CMD1 NAME2 CMD2: run CMD1, CMD2,
# CMD1, CMD2, ... (WARMUP untimed pairs, then RUNS timed ones), standard
# output to /dev/null; wall time from perf_counter, CPU time and peak RSS
# from wait4. Writes to OUT.json median/min/max of each tool's wall time
# (keys "kernel" for CMD1, "rsend" for CMD2), of the per-pair ratio
# CMD2/CMD1 ("ratio") and of CPU times, CMD2's largest peak RSS
# ("rsend_maxrss_kib") and every run under its NAME. The commands are split
# with shlex.
time_pairs() {
    python3 - "$@" <<'PY'
import json, os, shlex, statistics, sys, time
runs, warmup, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
cmds = [(sys.argv[4], shlex.split(sys.argv[5])), (sys.argv[6], shlex.split(sys.argv[7]))]
null = os.open("/dev/null", os.O_WRONLY)
def run(argv):
    pid = os.fork()
    if pid == 0:
        os.dup2(null, 1)
        os.execvp(argv[0], argv)
    t = time.perf_counter()
    _, status, ru = os.wait4(pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{argv} failed: {status}")
    return wall, ru.ru_utime, ru.ru_stime, ru.ru_maxrss
res = {name: [] for name, _ in cmds}
for i in range(warmup + runs):
    for name, argv in cmds:
        r = run(argv)
        if i >= warmup:
            res[name].append(r)
(ka, ra) = (res[cmds[0][0]], res[cmds[1][0]])
ratios = [r[0] / k[0] for k, r in zip(ka, ra)]
def stats(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}
summary = {
    "kernel": stats([k[0] for k in ka]), "rsend": stats([r[0] for r in ra]),
    "ratio": stats(ratios),
    "cpu_ratio": stats([(r[1] + r[2]) / (k[1] + k[2]) for k, r in zip(ka, ra)]),
    "kernel_cpu": stats([k[1] + k[2] for k in ka]), "rsend_cpu": stats([r[1] + r[2] for r in ra]),
    "kernel_sys": stats([k[2] for k in ka]), "rsend_user": stats([r[1] for r in ra]),
    "rsend_maxrss_kib": max(r[3] for r in ra),
    "runs": res,
}
json.dump(summary, open(out, "w"), indent=1)
PY
}

# smalltree_image_path N: where smalltree_image keeps the image of N files
# (under IMG_DIR, keyed by N and a hash of benches/smalltree.py).
smalltree_image_path() {
    local key
    key=$(sha256sum "$REPO/benches/smalltree.py" | cut -c1-12)
    echo "${IMG_DIR:?}/incr-$1-$key.img"
}

# smalltree_image N MNT: unless cached (or REBUILD is set), makes a btrfs
# image with subvolume vol holding benches/smalltree.py's tree of N files,
# read-only snapshot s0, the change, read-only snapshot s1; MNT is a free
# mount point. A failed build leaves no image behind.
smalltree_image() {
    local n=$1 mnt=$2 img t0 t1 t2
    img=$(smalltree_image_path "$n")
    if [[ -f $img && -z ${REBUILD:-} ]]; then
        log "$n files: cached image $img"
        return
    fi
    mkdir -p "$IMG_DIR"
    _PARTIAL="$img.partial"
    log "$n files: building $img"
    rm -f "$_PARTIAL"
    truncate -s $(( (n * 16 / 1024 + 1024) ))M "$_PARTIAL"
    mkfs.btrfs -q -f "$_PARTIAL" >/dev/null
    loop_mount "$_PARTIAL" "$mnt"
    btrfs -q subvolume create "$mnt/vol"
    t0=$(date +%s)
    python3 "$REPO/benches/smalltree.py" make "$mnt/vol" "$n"
    sync
    t1=$(date +%s)
    btrfs -q subvolume snapshot -r "$mnt/vol" "$mnt/s0"
    python3 "$REPO/benches/smalltree.py" change "$mnt/vol" "$n"
    sync
    btrfs -q subvolume snapshot -r "$mnt/vol" "$mnt/s1"
    sync
    t2=$(date +%s)
    btrfs filesystem df "$mnt" | sed 's/^/   /' >&2
    loop_umount "$mnt"
    mv "$_PARTIAL" "$img"
    _PARTIAL=
    log "$n files: tree written in $((t1 - t0)) s, change + snapshots $((t2 - t1)) s"
}
