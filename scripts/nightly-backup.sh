#!/usr/bin/env bash
# nightly-backup.sh: send one read-only snapshot to a backup destination, the
# way a cron job should: incrementally against the newest snapshot the
# destination holds, resuming a transfer a dropped connection cut short.
#
#   nightly-backup.sh [-r RETRIES] [-w SECONDS] -d DEVICE [-d DEVICE...] SNAPSHOT DEST [HOST]
#
#   DEVICE    a device (or image file) of the btrfs filesystem; repeat for
#             multi-device filesystems
#   SNAPSHOT  the read-only snapshot to send, as a path from the top level of
#             that filesystem (snaps/2026-12-02)
#   DEST      the directory on the backup side that receives it
#   HOST      where DEST is, reached with ssh (with no HOST: this machine)
#
# Environment: RSEND, RRECEIVE (the tools; default: from PATH), SSH (default
# ssh). Exit codes: 0 the snapshot is complete in DEST (sent now or before),
# 1 it is not (after RETRIES attempts, 3 by default, WAIT seconds apart, 60
# by default), 2 usage.
#
# Each attempt logs one line on standard error. The first attempt sends in
# full or incrementally, as `rreceive --list` says; an attempt after a failure
# resumes from where the receive stopped when it can (`rreceive
# --resume-token`), and otherwise starts again.
set -u -o pipefail

RSEND=${RSEND:-rsend}
RRECEIVE=${RRECEIVE:-rreceive}
SSH=${SSH:-ssh}
retries=3
wait=60
devices=()

usage() {
    sed -n '6,7p' "$0" | sed 's/^#  *//' >&2
    exit 2
}
log() { echo "nightly-backup: $(date -u +%FT%TZ) $*" >&2; }

while getopts "d:r:w:h" opt; do
    case $opt in
        d) devices+=(-d "$OPTARG") ;;
        r) retries=$OPTARG ;;
        w) wait=$OPTARG ;;
        *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || [ $# -eq 3 ] || usage
[ ${#devices[@]} -gt 0 ] || usage
snapshot=$1 dest=$2 host=${3:-}
name=${snapshot%/}
name=${name##*/}

# Runs a command on the backup side: over ssh (quoted for its shell) or here.
remote() {
    if [ -n "$host" ]; then
        "$SSH" "$host" "$(printf '%q ' "$@")"
    else
        "$@"
    fi
}

for attempt in $(seq 1 "$retries"); do
    if ! list=$(remote "$RRECEIVE" --list "$dest"); then
        log "attempt $attempt: cannot list $dest"
    elif printf '%s\n' "$list" | awk -F'\t' -v n="$name" '$1 == n && $5 == "complete" { f = 1 } END { exit !f }'; then
        log "$name is complete in $dest"
        exit 0
    elif token=$(remote "$RRECEIVE" --resume-token "$dest/$name" 2>/dev/null); then
        log "attempt $attempt: resuming $name"
        "$RSEND" "${devices[@]}" -q --resume "$token" "$snapshot" | remote "$RRECEIVE" -q "$dest"
    elif printf '%s\n' "$list" | awk -F'\t' -v n="$name" '$1 == n { f = 1 } END { exit !f }'; then
        # There, incomplete and not resumable: start again.
        log "attempt $attempt: $name in $dest cannot be resumed; it has to be deleted and sent again"
        exit 1
    else
        log "attempt $attempt: sending $name"
        printf '%s\n' "$list" | "$RSEND" "${devices[@]}" --parent-from - "$snapshot" | remote "$RRECEIVE" -q "$dest"
    fi
    status=("${PIPESTATUS[@]}")
    if [ "${status[*]}" = "0 0" ] || [ "${status[*]}" = "0 0 0" ]; then
        log "$name is complete in $dest"
        exit 0
    fi
    log "attempt $attempt failed (exit codes ${status[*]})"
    [ "$attempt" -lt "$retries" ] && sleep "$wait"
done
exit 1
