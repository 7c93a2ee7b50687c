#!/usr/bin/env bash
# nightly-backup.sh: send one read-only snapshot to a backup destination, the
# way a cron job should: incrementally against the newest snapshot of the same
# subvolume the destination holds, resuming a transfer that stopped for a
# cause that can go away, and never retrying one that would only fail again.
#
#   nightly-backup.sh [-r RETRIES] [-w SECONDS] [--delete-incomplete] -d DEVICE [-d DEVICE...] SNAPSHOT DEST [HOST]
#
#   DEVICE    a device (or image file) of the btrfs filesystem; repeat for
#             multi-device filesystems
#   SNAPSHOT  the read-only snapshot to send, as a path from the top level of
#             that filesystem (snaps/2026-12-02)
#   DEST      the directory on the backup side that receives it
#   HOST      where DEST is, reached with ssh (with no HOST: this machine)
#   --delete-incomplete
#             when DEST holds an incomplete SNAPSHOT that cannot be resumed
#             (a stop that resuming would repeat: a refused path, a corrupt
#             stream, a tampered parent...), delete it and send again; without
#             it the job stops and says what to delete
#
# Environment: RSEND, RRECEIVE (the tools; default: from PATH), SSH (default
# ssh). Exit codes: 0 the snapshot is complete in DEST (sent now or before),
# 1 it is not, 2 usage.
#
# Each attempt logs one line on standard error. rreceive's exit code says what
# a stop was: 3 a cause that can go away (a full disk, a cut connection, a
# signal): the next attempt, WAIT seconds later (60 by default), resumes
# where the receive stopped (`rreceive --resume-token`), or sends again when
# nothing was kept; at most RETRIES attempts (3 by default). 1 a stop that
# would happen again: no retry; with --delete-incomplete the partial
# subvolume is deleted and the snapshot sent again once. An ssh that cannot
# connect (255) and a receive killed by a signal (it resumes from its
# journal) count as causes that can go away.
set -u -o pipefail

RSEND=${RSEND:-rsend}
RRECEIVE=${RRECEIVE:-rreceive}
SSH=${SSH:-ssh}
retries=3
wait=60
delete_incomplete=0
devices=()

usage() {
    sed -n '7p' "$0" | sed 's/^#  *//' >&2
    exit 2
}
log() { echo "nightly-backup: $(date -u +%FT%TZ) $*" >&2; }

args=()
for a in "$@"; do
    case $a in
        --delete-incomplete) delete_incomplete=1 ;;
        --help) usage ;;
        *) args+=("$a") ;;
    esac
done
set -- "${args[@]+"${args[@]}"}"
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

# The partial subvolume cannot be resumed (why: $1): delete it when allowed,
# else say what to delete and stop.
cannot_resume() {
    if [ "$delete_incomplete" = 1 ] && [ "$deleted" = 0 ]; then
        deleted=1
        # Sending it again is an attempt of its own.
        retries=$((retries + 1))
        log "$name in $dest cannot be resumed ($1); deleting it (--delete-incomplete) to send it again"
        if ! remote "$RRECEIVE" --delete-incomplete "$dest/$name" 2>"$errfile" &&
            ! grep -q 'does not exist' "$errfile"; then
            log "deleting $dest/$name failed: $(tr '\n' ' ' <"$errfile")"
            exit 1
        fi
        return 0
    fi
    local where="rreceive --delete-incomplete $dest/$name"
    [ -n "$host" ] && where="ssh $host $where"
    log "$name in $dest cannot be resumed ($1): delete it ($where) or run with --delete-incomplete, and the next run sends it again"
    exit 1
}

deleted=0
errfile=$(mktemp)
trap 'rm -f "$errfile"' EXIT
attempt=0
while [ "$attempt" -lt "$retries" ]; do
    attempt=$((attempt + 1))
    if ! list=$(remote "$RRECEIVE" --list "$dest" 2>"$errfile"); then
        log "attempt $attempt: cannot list $dest: $(tr '\n' ' ' <"$errfile")"
        [ "$attempt" -lt "$retries" ] && sleep "$wait"
        continue
    fi
    if printf '%s\n' "$list" | awk -F'\t' -v n="$name" '$1 == n && $5 == "complete" { f = 1 } END { exit !f }'; then
        log "$name is complete in $dest"
        exit 0
    fi
    if token=$(remote "$RRECEIVE" --resume-token "$dest/$name" 2>"$errfile"); then
        log "attempt $attempt: resuming $name"
        "$RSEND" "${devices[@]}" -q --resume "$token" "$snapshot" 2>"$errfile" | remote "$RRECEIVE" -q "$dest"
    else
        if printf '%s\n' "$list" | awk -F'\t' -v n="$name" '$1 == n { f = 1 } END { exit !f }'; then
            why=$(sed -n 's/.*: no resume token: //p' "$errfile" | head -n1)
            cannot_resume "${why:-see rreceive --resume-token}"
        fi
        log "attempt $attempt: sending $name"
        printf '%s\n' "$list" | "$RSEND" "${devices[@]}" --parent-from - "$snapshot" 2>"$errfile" | remote "$RRECEIVE" -q "$dest"
    fi
    status=("${PIPESTATUS[@]}")
    sent=${status[-2]} received=${status[-1]}
    # What rsend said (which parent, and why).
    cat "$errfile" >&2
    if [ "$sent" = 0 ] && [ "$received" = 0 ]; then
        log "$name is complete in $dest"
        exit 0
    fi
    # rsend's own failure (not a pipe the receive closed): it would repeat.
    if [ "$sent" != 0 ] && [ "$received" != 255 ] && ! grep -q 'Broken pipe' "$errfile"; then
        log "attempt $attempt: rsend failed (exit $sent); not retried"
        exit 1
    fi
    case $received in
        3 | 255 | 129 | 130 | 137 | 143)
            # Stopped, killed (its journal says where), or ssh lost.
            log "attempt $attempt stopped (rreceive exit $received): it can go on later"
            ;;
        1)
            log "attempt $attempt failed (rreceive exit 1): retrying would fail the same way"
            cannot_resume "rreceive exit 1"
            continue
            ;;
        *)
            log "attempt $attempt failed (exit codes ${status[*]}); not retried"
            exit 1
            ;;
    esac
    [ "$attempt" -lt "$retries" ] && sleep "$wait"
done
log "$name is not complete in $dest after $retries attempts"
exit 1
