# Shared set-up for the benchmark scripts; source it, do not run it.
#
#   BENCH=name.sh; . "$(dirname "${BASH_SOURCE[0]}")/common.sh"
#
# Gives: REPO, root check, LC_ALL=C, umask 022, log/die, need_pkg,
# build_rsend (sets RSEND; honours CARGO_TARGET_DIR), maxrss,
# machine_line, and a scratch directory TMP (mktemp -d under TMPDIR) whose
# mounts and loop devices are undone on any exit: call scratch_dir, then
# register mount points with `scratch_mount MNT` and images with
# `scratch_image IMG` (every loop device of a registered image is detached).
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

# build_rsend [PACKAGE]: cargo build --release -p PACKAGE (default rsend) as
# the invoking user (so target/ does not become root-owned); sets RSEND.
build_rsend() {
    local pkg=${1:-rsend} target=${CARGO_TARGET_DIR:-$REPO/target}
    log "building $pkg (release)"
    if [[ -n ${SUDO_USER:-} && $SUDO_USER != root ]]; then
        sudo -u "$SUDO_USER" -H bash -lc \
            "cd '$REPO' && ${CARGO_TARGET_DIR:+CARGO_TARGET_DIR='$CARGO_TARGET_DIR'} cargo build --release -p $pkg" >&2
    else
        (cd "$REPO" && cargo build --release -p "$pkg") >&2
    fi
    RSEND="$target/release/rsend"
    [[ -x $RSEND ]] || die "$RSEND was not built"
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
