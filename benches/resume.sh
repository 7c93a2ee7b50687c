#!/usr/bin/env bash
# benches/resume.sh: what resuming costs (issue #12). A full send of a 1 GiB
# snapshot is cut at 90% of its bytes and received by rreceive; the receive
# is resumed with rsend --resume. Reports the bytes and time of the resumed
# stream against the whole one (the goal: at most 15% of the bytes), and
# checks that the resumed receive equals an uninterrupted one. btrfs send
# has no resume: starting again costs 100% there.
#
# Needs root, loop devices, btrfs-progs, python3. WORK (default
# /var/tmp/rsend-bench-resume) keeps the image between runs; CUT (default 90)
# is where the stream is cut, in percent.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q
bin=$PWD/target/release
work=${WORK:-/var/tmp/rsend-bench-resume}
cut_pct=${CUT:-90}
mkdir -p "$work"
img=$work/src.img
mnt=$work/mnt
cleanup() {
    umount "$mnt" 2>/dev/null || true
}
trap cleanup EXIT

if [ ! -s "$work/ready" ]; then
    rm -f "$img"
    truncate -s 3G "$img"
    mkfs.btrfs -q -f "$img"
    mkdir -p "$mnt"
    mount -o loop "$img" "$mnt"
    btrfs subvolume create "$mnt/data" >/dev/null
    # 1 GiB: 56 large files of random data and 2000 small ones.
    python3 - "$mnt/data" <<'EOF'
import os, random, sys
root = sys.argv[1]
rng = random.Random(12)
for i in range(56):
    d = os.path.join(root, f"big/{i % 7}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i}"), "wb") as f:
        for _ in range(18):
            f.write(rng.randbytes(1 << 20))
for i in range(2000):
    d = os.path.join(root, f"small/{i % 40}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"s{i}"), "wb") as f:
        f.write(rng.randbytes(rng.randrange(1, 64 << 10)))
EOF
    btrfs subvolume snapshot -r "$mnt/data" "$mnt/snap" >/dev/null
    umount "$mnt"
    echo 1 >"$work/ready"
fi

ms() { echo $(($(date +%s%N) / 1000000)); }
sync
echo 3 >/proc/sys/vm/drop_caches
size=$("$bin/rsend" -q -d "$img" -n snap | awk '$1 == "size" {print $2}')
t0=$(ms)
"$bin/rsend" -q -d "$img" snap -f "$work/full.stream"
t1=$(ms)
full_bytes=$(stat -c %s "$work/full.stream")
[ "$size" = "$full_bytes" ] || { echo "rsend -n said $size, the stream has $full_bytes bytes" >&2; exit 1; }
cut=$((full_bytes * cut_pct / 100))
head -c "$cut" "$work/full.stream" >"$work/cut.stream"

rm -rf "$work/dest" "$work/whole"
mkdir -p "$work/dest" "$work/whole"
if "$bin/rreceive" -q -f "$work/cut.stream" "$work/dest" 2>"$work/cut.log"; then
    echo "the cut stream was received whole?" >&2
    exit 1
fi
token=$("$bin/rreceive" --resume-token "$work/dest/snap")
sync
echo 3 >/proc/sys/vm/drop_caches
t2=$(ms)
"$bin/rsend" -q -d "$img" --resume "$token" snap -f "$work/resumed.stream"
t3=$(ms)
resumed_bytes=$(stat -c %s "$work/resumed.stream")
"$bin/rreceive" -q -f "$work/resumed.stream" "$work/dest"
"$bin/rreceive" -q -f "$work/full.stream" "$work/whole"
for d in dest whole; do
    setfattr -x user.rreceive.subvol "$work/$d/snap"
done
if ! diff <(python3 testdata/manifest.py "$work/dest/snap") <(python3 testdata/manifest.py "$work/whole/snap") >/dev/null; then
    echo "the resumed receive differs from the uninterrupted one" >&2
    exit 1
fi

applied=$(echo "$token" | cut -d: -f8)
echo "machine: $(nproc) cores, kernel $(uname -r), $(btrfs --version | head -1)"
echo "full stream: $full_bytes bytes (rsend -n: $size), sent in $((t1 - t0)) ms (cold cache)"
echo "cut at $cut_pct%: $cut bytes; the receive applied up to byte $applied and stopped cleanly"
awk -v r="$resumed_bytes" -v f="$full_bytes" -v tr=$((t3 - t2)) -v tf=$((t1 - t0)) 'BEGIN {
    printf "resumed stream: %d bytes = %.4f of the full stream (goal <= 0.15), sent in %d ms = %.2f of the full send'\''s time (cold cache)\n", r, r / f, tr, tr / tf
}'
echo "the resumed receive equals an uninterrupted one (manifests compared)"
