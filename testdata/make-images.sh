#!/bin/bash
# Regenerate testdata/images/: real-kernel btrfs images (mkfs.btrfs + loop
# mount + populate + snapshots + umount) for the offline on-disk reader
# (crates/send), each with INFO, subvolume lists, per-subvolume manifests
# (testdata/manifest.py), a per-file extent table (files.tsv) and
# zstd -19 --long compressed device images.
#
# Usage: sudo testdata/make-images.sh
#        sudo ONLY="csum-crc32c raid5" testdata/make-images.sh   (rebuild a subset)
#
# Needs: root, btrfs + loop devices, btrfs-progs (>= 6.3 for block-group-tree),
# zstd, attr (setfattr), acl (setfacl), libcap2-bin (setcap), e2fsprogs
# (chattr), xfsprogs (xfs_io), util-linux, python3.
#
# Everything happens in a mktemp -d directory; every mount is unmounted and
# every loop device this script attached is forgotten (btrfs device scan -u)
# and detached on exit, also on failure.  testdata/images/<name>/ is only
# replaced when the whole run succeeded.  KEEP_STAGE=DIR copies partial
# outputs of a failed run to DIR.  Output layout: testdata/images/README.md.
set -euo pipefail

if [[ $EUID -ne 0 ]]; then
    echo "make-images.sh: must run as root" >&2
    exit 1
fi

export LC_ALL=C TZ=UTC
umask 022

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT="$HERE/images"
MANIFEST_PY="$HERE/manifest.py"

TMP=$(mktemp -d /tmp/make-images.XXXXXX)
STAGE="$TMP/out"
RAWROOT="$TMP/raw"
mkdir "$STAGE" "$RAWROOT" "$TMP/mnt"
MOUNTS=()
LOOPS=()

ALL_IMAGES=(csum-crc32c csum-xxhash csum-sha256 csum-blake2
            nodesize-4k nodesize-64k
            profile-dup profile-mixed
            raid0 raid1 raid10 raid1c3 raid5 raid6
            compress-zlib compress-lzo compress-zstd
            reflink-snapshots logtree)
# shellcheck disable=SC2206
SELECTED=(${ONLY:-${ALL_IMAGES[@]}})
for n in "${SELECTED[@]}"; do
    [[ " ${ALL_IMAGES[*]} " == *" $n "* ]] || { echo "make-images.sh: unknown image $n" >&2; exit 2; }
done

# Loop devices whose backing file lives under $TMP (ours, and only ours).
our_loops() {
    losetup -l -n -O NAME,BACK-FILE 2>/dev/null | while read -r dev back; do
        case $back in "$TMP"/*) echo "$dev" ;; esac
    done
}

cleanup() {
    local rc=$? i m dev try
    set +e
    cd /
    for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
        m=${MOUNTS[i]}
        for try in 1 2 3 4 5; do
            mountpoint -q "$m" || break
            umount "$m" 2>/dev/null && break
            sleep 1
        done
        if mountpoint -q "$m"; then
            echo "make-images.sh: $m busy, lazy unmount" >&2
            umount -l "$m"
        fi
    done
    for dev in "${LOOPS[@]}" $(our_loops); do
        [[ -b $dev ]] || continue
        # only touch devices still backed by one of our files
        case $(losetup -n -O BACK-FILE "$dev" 2>/dev/null) in
            "$TMP"/*)
                btrfs device scan -u "$dev" >/dev/null 2>&1
                losetup -d "$dev" 2>/dev/null ;;
        esac
    done
    if [[ $rc -ne 0 && -n ${KEEP_STAGE:-} ]]; then
        mkdir -p "$KEEP_STAGE" && cp -r "$STAGE"/. "$KEEP_STAGE"/ &&
            echo "make-images.sh: partial outputs copied to $KEEP_STAGE" >&2
    fi
    if grep -qF " $TMP/" /proc/self/mounts || [[ -n $(our_loops) ]]; then
        echo "make-images.sh: WARNING: something is still mounted/attached under $TMP, not removing it" >&2
    else
        rm -rf "$TMP"
    fi
    if [[ $rc -ne 0 ]]; then
        echo "make-images.sh: FAILED (exit $rc); $OUT left unchanged" >&2
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log() { echo "== $*" >&2; }
die() { echo "make-images.sh: ERROR: $*" >&2; exit 1; }

# ---------------------------------------------------------------------------
# Python helpers (data generators, inode map, dump-tree analysis, README)

HELPERS="$TMP/helpers.py"
cat > "$HELPERS" <<'PYEOF'
import hashlib, os, re, socket, stat, subprocess, sys

# ---- deterministic data -------------------------------------------------
WORDS = (b"btrfs send receive stream subvolume snapshot extent inode clone "
         b"write truncate chmod chown utimes xattr rename link unlink rmdir "
         b"mkdir mkfile mknod fifo socket symlink hole fallocate encoded zstd "
         b"zlib lzo compression sector page buffer kernel progs dump parser "
         b"the quick brown fox jumps over a lazy dog and then sleeps again").split()
POOL = None  # 64 KiB of "text" from a fixed seed, see gen("striped")


def gen(kind, size, seed):
    """random: sha256 counter stream (incompressible)
    text:    pseudo-random words (compresses ~3-4x)
    repeat:  text with every line repeated 8 times (compresses well)
    striped: a fixed 64 KiB pool of pseudo-random words (gen text 65536 stripe-pool),
             repeated with period 64 KiB (= btrfs stripe_len), with the first
             32 bytes of every 4 KiB block replaced by sha256(seed:blk): every
             block is unique (a misplaced block or stripe changes the file's
             sha256), yet the device images and the RAID5/6 parity compress
             well with zstd --long
    zero:    zero bytes"""
    seed = seed.encode()
    out = bytearray()
    if kind == "random":
        i = 0
        while len(out) < size:
            out += hashlib.sha256(seed + b":" + str(i).encode()).digest()
            i += 1
    elif kind in ("text", "repeat"):
        i = line = 0
        while len(out) < size:
            d = hashlib.sha256(seed + b":" + str(i).encode()).digest()
            i += 1
            l = b"%06d " % line + b" ".join(WORDS[x % len(WORDS)] for x in d[:12]) + b"\n"
            line += 1
            out += l * (8 if kind == "repeat" else 1)
    elif kind == "striped":
        global POOL
        if POOL is None:
            POOL = gen("text", 65536, "stripe-pool")
        blk = 0
        while len(out) < size:
            base = (blk * 4096) % 65536
            out += hashlib.sha256(seed + b":blk:%d" % blk).digest() + POOL[base + 32:base + 4096]
            blk += 1
    elif kind == "zero":
        out = bytearray(size)
    else:
        raise SystemExit("bad kind " + kind)
    return bytes(out[:size])


def cmd_gen(kind, size, seed):
    sys.stdout.buffer.write(gen(kind, int(size), seed))


def cmd_put(path, offset, kind, size, seed):
    """write generated data at OFFSET without truncating"""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, gen(kind, int(size), seed), int(offset))
    finally:
        os.close(fd)


def cmd_xattr(path, name, kind, size, seed):
    os.setxattr(path, name, gen(kind, int(size), seed), follow_symlinks=False)


def cmd_mksock(path):
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.close()


def cmd_manyfiles(d, start, count, size, seed):
    """COUNT files d/fNNNNNN (start..), SIZE bytes of text each"""
    os.makedirs(d, exist_ok=True)
    for i in range(int(start), int(start) + int(count)):
        with open(os.path.join(d, "f%06d" % i), "wb") as f:
            f.write(gen("text", int(size), "%s:%d" % (seed, i)))


# ---- subvolumes / inode map (run on the mounted fs) ---------------------
def cmd_subvols(mnt):
    """id TAB path for FS_TREE and every subvolume (btrfs subvolume list)"""
    out = subprocess.run(["btrfs", "subvolume", "list", mnt], check=True,
                         stdout=subprocess.PIPE).stdout.decode("utf-8", "surrogateescape")
    print("5\t.")
    for line in out.splitlines():
        m = re.match(r"^ID (\d+) gen \d+ top level \d+ path (.*)$", line)
        if not m:
            raise SystemExit("cannot parse subvolume list line %r" % line)
        print("%s\t%s" % (m.group(1), m.group(2)))


def cmd_inomap(mnt, subvols_tsv):
    """subvol TAB ino TAB nlink TAB path_hex for every regular file (smallest path of
    each inode), skipping nested subvolumes exactly like manifest.py"""
    rows = []
    for line in open(subvols_tsv, encoding="utf-8", errors="surrogateescape"):
        sid, path = line.rstrip("\n").split("\t", 1)
        root = os.fsencode(os.path.join(mnt, path) if path != "." else mnt)
        rst = os.lstat(root)
        seen = {}

        def walk(rel):
            full = os.path.join(root, rel) if rel else root
            for e in sorted(os.scandir(full), key=lambda e: e.name):
                crel = e.name if not rel else rel + b"/" + e.name
                st = os.lstat(os.path.join(root, crel))
                if stat.S_ISDIR(st.st_mode):
                    if st.st_dev != rst.st_dev or st.st_ino in (2, 256):
                        continue
                    walk(crel)
                elif stat.S_ISREG(st.st_mode):
                    if st.st_ino not in seen or crel < seen[st.st_ino][1]:
                        seen[st.st_ino] = (st.st_nlink, crel)
        walk(b"")
        for ino, (nl, p) in sorted(seen.items()):
            rows.append("%s\t%d\t%d\t%s" % (sid, ino, nl, p.hex()))
    sys.stdout.write("".join(r + "\n" for r in rows))


# ---- offline analysis (run on the unmounted image files) ----------------
ITEM_RE = re.compile(r"^\titem \d+ key \((\S+) (\S+) (\d+)\) itemoff \d+ itemsize (\d+)$")
PROFILES = ("RAID10", "RAID1C34", "RAID1C4", "RAID1C3", "RAID1", "RAID0", "RAID56", "RAID5", "RAID6", "DUP", "single")


def dump_tree(devs, *args):
    r = subprocess.run(["btrfs", "inspect-internal", "dump-tree", "--noscan", *args, *devs],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        raise SystemExit("dump-tree %s failed: %s" % (args, r.stderr.decode(errors="replace")))
    return r.stdout.decode("latin-1")


def items(text):
    cur = None
    for line in text.split("\n"):
        m = ITEM_RE.match(line)
        if m:
            if cur:
                yield cur
            cur = (m.group(1), m.group(2), int(m.group(3)), [])
        elif cur is not None and line.startswith("\t\t"):
            cur[3].append(line.strip())
        elif cur is not None:
            yield cur
            cur = None
    if cur:
        yield cur


def super_info(dev):
    r = subprocess.run(["btrfs", "inspect-internal", "dump-super", "-f", dev], check=True,
                       stdout=subprocess.PIPE).stdout.decode("latin-1")
    info, key = {}, None
    for line in r.splitlines():
        m = re.match(r"^(\S+)\s+(.*)$", line)
        if m and not line.startswith(("\t", " ")):
            key = m.group(1)
            info[key] = m.group(2).strip()
        elif key and line[:1] in ("\t", " "):
            info[key] = info[key] + " " + line.strip()
    return info, r


def flags_of(s):
    m = re.search(r"\((.*)\)", s or "")
    if not m:
        return "none"
    return "|".join(x.strip() for x in m.group(1).split("|") if x.strip()) or "none"


def objid(s):
    if s == "FS_TREE":
        return 5
    return int(s) if s.isdigit() else None


def profile_of(typestr):
    t = typestr.split("|")
    for p in PROFILES:
        if p in t:
            return p.lower()
    return "single"


def cmd_analyze(outdir, inomap, subvols_tsv, *rest):
    sets, expects, mins, devs = [], [], [], []
    it = iter(rest)
    for a in it:
        if a == "--set":
            sets.append(next(it).split("=", 1))
        elif a == "--expect":
            expects.append(next(it).split("=", 1))
        elif a == "--min":
            k, v = next(it).split("=", 1)
            mins.append((k, int(v)))
        else:
            devs.append(a)
    sup, _ = super_info(devs[0])
    csum = re.match(r"\d+ \((\w+)\)", sup["csum_type"]).group(1)
    csum = {"blake2b": "blake2", "xxhash64": "xxhash"}.get(csum, csum)

    # chunks
    chunks = []
    for oid, typ, off, body in items(dump_tree(devs, "-t", "chunk")):
        if typ != "CHUNK_ITEM":
            continue
        b = " ".join(body)
        m = re.search(r"length (\d+) owner \d+ stripe_len (\d+) type (\S+)", b)
        n = re.search(r"num_stripes (\d+) sub_stripes (\d+)", b)
        chunks.append(dict(start=off, length=int(m.group(1)), stripe_len=int(m.group(2)),
                           type=m.group(3), num_stripes=int(n.group(1))))
    prof = {}
    for c in chunks:
        kinds = [k for k in ("DATA", "METADATA", "SYSTEM") if k in c["type"].split("|")]
        for k in kinds:
            prof.setdefault(k, set()).add(profile_of(c["type"]))
    mixed = any({"DATA", "METADATA"} <= set(c["type"].split("|")) for c in chunks)

    # root items
    roots = {}
    for oid, typ, off, body in items(dump_tree(devs, "-t", "root")):
        if typ != "ROOT_ITEM":
            continue
        sid = objid(oid)
        if sid is None or not (sid == 5 or 256 <= sid < 2**64 - 256):
            continue
        b = " ".join(body)
        roots[sid] = dict(level=int(re.search(r"\blevel (\d+)", b).group(1)),
                          ro="RDONLY" in re.search(r"flags (\S+)", b).group(1))

    # inode map
    inos = {}
    for line in open(inomap):
        sid, ino, nl, ph = line.rstrip("\n").split("\t")
        inos[(int(sid), int(ino))] = (int(nl), ph)
    listed = [int(l.split("\t", 1)[0]) for l in open(subvols_tsv)]

    rows = []
    for sid in listed:
        if sid not in roots:
            raise SystemExit("subvolume %d listed but has no ROOT_ITEM" % sid)
        text = dump_tree(devs, "--hide-names", "-t", str(sid))
        m = re.search(r"^(?:node \d+ level (\d+)|leaf \d+) items", text, re.M)
        if not m or int(m.group(1) or 0) != roots[sid]["level"]:
            raise SystemExit("subvolume %d: root block level disagrees with ROOT_ITEM" % sid)
        iflags = {}
        exts = {}
        for oid, typ, off, body in items(text):
            if not oid.isdigit():
                continue
            ino = int(oid)
            if (sid, ino) not in inos:
                continue
            b = " ".join(body)
            if typ == "INODE_ITEM":
                iflags[ino] = flags_of(re.search(r"flags (\S+)", b).group(1))
            elif typ == "EXTENT_DATA":
                t = re.search(r"type \d+ \((\w+)\)", b).group(1)
                e = dict(off=off, type=t, comp="none", bytenr="-", disk="-", eoff="-", num="-", ram="-", isize="-")
                if t == "inline":
                    m = re.search(r"inline extent data size (\d+) ram_bytes (\d+) compression \d+ \((\w+)\)", b)
                    e.update(isize=m.group(1), ram=m.group(2), comp=m.group(3))
                elif t == "regular":
                    m = re.search(r"extent data disk byte (\d+) nr (\d+) extent data offset (\d+) nr (\d+) ram (\d+)"
                                  r" extent compression \d+ \((\w+)\)", b)
                    e.update(bytenr=m.group(1), disk=m.group(2), eoff=m.group(3), num=m.group(4),
                             ram=m.group(5), comp=m.group(6))
                elif t == "prealloc":
                    m = re.search(r"prealloc data disk byte (\d+) nr (\d+) prealloc data offset (\d+) nr (\d+)", b)
                    e.update(bytenr=m.group(1), disk=m.group(2), eoff=m.group(3), num=m.group(4))
                else:
                    raise SystemExit("unknown extent type %r" % t)
                exts.setdefault(ino, []).append(e)
        for (s2, ino), (nl, ph) in sorted(inos.items()):
            if s2 != sid:
                continue
            fl = iflags.get(ino)
            if fl is None:
                raise SystemExit("subvol %d ino %d: no INODE_ITEM in dump" % (sid, ino))
            el = exts.get(ino) or [None]
            for e in el:
                if e is None:
                    rows.append([sid, ino, nl, ph, fl, "-", "none", "none", "-", "-", "-", "-", "-", "-"])
                else:
                    rows.append([sid, ino, nl, ph, fl, e["off"], e["type"], e["comp"], e["bytenr"], e["disk"],
                                 e["eoff"], e["num"], e["ram"], e["isize"]])
    with open(os.path.join(outdir, "files.tsv"), "w") as f:
        f.write("# files.tsv v1: subvol ino nlink path_hex inode_flags file_offset type compression "
                "disk_bytenr disk_num_bytes extent_offset num_bytes ram_bytes inline_size path_repr "
                "(TAB separated; see README.md)\n")
        for r in rows:
            f.write("\t".join(str(x) for x in r) + "\t" + repr(bytes.fromhex(r[3])) + "\n")

    # statistics
    st = dict(extents_inline=0, extents_inline_compressed=0, extents_regular=0, extents_compressed=0,
              extents_partial_compressed=0, extents_prealloc=0, extents_hole=0, extents_reflinked=0,
              files_nodatasum=0)
    refs = {}
    data = set()
    nds = set()
    for r in rows:
        sid, ino, typ, comp = r[0], r[1], r[6], r[7]
        if "NODATASUM" in r[4]:
            nds.add((sid, ino))
        if typ == "inline":
            st["extents_inline"] += 1
            if comp != "none":
                st["extents_inline_compressed"] += 1
        elif typ == "regular":
            if r[8] == "0":
                st["extents_hole"] += 1
                continue
            st["extents_regular"] += 1
            if comp != "none":
                st["extents_compressed"] += 1
                if r[10] != "0" or int(r[11]) < int(r[12]):
                    st["extents_partial_compressed"] += 1
        elif typ == "prealloc":
            st["extents_prealloc"] += 1
        if typ in ("regular", "prealloc"):
            refs.setdefault((sid, r[8]), set()).add(ino)
            data.add((int(r[8]), int(r[9])))
    st["files_nodatasum"] = len(nds)
    st["extents_reflinked"] = len({b for (s, b), v in refs.items() if len(v) >= 2})

    # RAID5/6: full stripes completely covered by data extents
    fullstripes = 0
    ivs = sorted(data)
    merged = []
    for s, l in ivs:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], s + l)
        else:
            merged.append([s, s + l])
    for c in chunks:
        t = c["type"].split("|")
        if "DATA" not in t or not ({"RAID5", "RAID6"} & set(t)):
            continue
        par = 1 if "RAID5" in t else 2
        fs = c["stripe_len"] * (c["num_stripes"] - par)
        for k in range(c["length"] // fs):
            a, z = c["start"] + k * fs, c["start"] + (k + 1) * fs
            if any(s <= a and z <= e for s, e in merged):
                fullstripes += 1

    if mixed:
        dprof = mprof = ",".join(sorted(prof.get("DATA", {"single"})))
    else:
        dprof = ",".join(sorted(prof.get("DATA", {"none"})))
        mprof = ",".join(sorted(prof.get("METADATA", {"none"})))
    height = max(r["level"] for s, r in roots.items() if s in listed) + 1
    info = dict(sets)
    info.update(csum=csum, nodesize=sup["nodesize"], sectorsize=sup["sectorsize"],
                data_profile=dprof, metadata_profile=mprof, fs_tree_height=str(height),
                generation=sup["generation"], fsid=sup["fsid"])
    order = ["devices", "mkfs", "mount", "csum", "nodesize", "sectorsize", "data_profile", "metadata_profile",
             "features", "fs_tree_height", "generation", "fsid"]
    extra = dict(
        label=sup.get("label", ""),
        num_devices=sup["num_devices"],
        system_profile=",".join(sorted(prof.get("SYSTEM", {"none"}))),
        mixed_block_groups="yes" if mixed else "no",
        log_root=sup["log_root"],
        log_root_level=sup["log_root_level"],
        root_level=sup["root_level"],
        subvolumes=",".join(str(s) for s in listed),
        ro_subvolumes=",".join(str(s) for s in listed if roots[s]["ro"]) or "-",
        subvol_levels=",".join("%d:%d" % (s, roots[s]["level"]) for s in listed),
        incompat_flags=flags_of(sup["incompat_flags"]),
        compat_ro_flags=flags_of(sup["compat_ro_flags"]),
        raid56_full_stripes=str(fullstripes),
        **{k: str(v) for k, v in st.items()})
    for k, v in extra.items():
        info.setdefault(k, v)
    with open(os.path.join(outdir, "INFO"), "w") as f:
        for k in order:
            f.write("%s=%s\n" % (k, info[k]))
        for k in info:
            if k not in order:
                f.write("%s=%s\n" % (k, info[k]))
    bad = []
    for k, v in expects:
        if info.get(k) != v:
            bad.append("%s=%r, expected %r" % (k, info.get(k), v))
    for k, v in mins:
        if int(info.get(k, "0")) < v:
            bad.append("%s=%r, expected >= %d" % (k, info.get(k), v))
    if bad:
        raise SystemExit("analyze %s: " % outdir + "; ".join(bad))


def cmd_root_level(sid, *devs):
    for oid, typ, off, body in items(dump_tree(devs, "-t", "root")):
        if typ == "ROOT_ITEM" and objid(oid) == int(sid):
            print(re.search(r"\blevel (\d+)", " ".join(body)).group(1))
            return
    raise SystemExit("no ROOT_ITEM for %s" % sid)


def cmd_info(path, key):
    for line in open(path):
        k, _, v = line.rstrip("\n").partition("=")
        if k == key:
            print(v)
            return
    raise SystemExit("%s: no key %s" % (path, key))


def cmd_readme(out, descfile, kernel, progs):
    desc = {}
    for line in open(descfile, encoding="utf-8"):
        n, d = line.rstrip("\n").split("\t", 1)
        desc[n] = d
    rows = []
    total = 0
    for n in desc:
        d = os.path.join(out, n)
        if not os.path.isdir(d):
            continue
        info = dict(l.rstrip("\n").split("=", 1) for l in open(os.path.join(d, "INFO")))
        size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".img.zst"))
        allsize = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        total += allsize
        rows.append("| `%s` | %s | %s | %s/%s | %s | %s | %s | %.0f KiB (%.0f KiB) | %s |" % (
            n, info["devices"], info["csum"], info["nodesize"], info["sectorsize"],
            info["data_profile"] + "/" + info["metadata_profile"], info["mount"] or "-",
            info["fs_tree_height"], size / 1024, allsize / 1024, desc[n]))
    tmpl = open(os.path.join(out, ".README.tmpl"), encoding="utf-8").read()
    table = ("| image | devs | csum | node/sector | data/meta | mount | height | .zst (dir) | covers |\n"
             "|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows))
    text = (tmpl.replace("@KERNEL@", kernel).replace("@PROGS@", progs).replace("@TABLE@", table)
            .replace("@TOTAL@", "%.1f MiB" % (total / 1048576)))
    open(os.path.join(out, "README.md"), "w", encoding="utf-8").write(text)


if __name__ == "__main__":
    globals()["cmd_" + sys.argv[1].replace("-", "_")](*sys.argv[2:])
PYEOF

py() { python3 "$HELPERS" "$@"; }
gen() { py gen "$@"; }                 # gen KIND SIZE SEED > file
put() { py put "$@"; }                 # put FILE OFFSET KIND SIZE SEED
mksock() { py mksock "$1"; }

# stamp TIME PATH...: set atime+mtime, not following symlinks
stamp() { local t=$1; shift; touch -h -d "$t" -- "$@"; }

# stamp_tree TIME DIR: DIR and everything below it inside the same subvolume
# (nested subvolume roots -- ino 256 -- and empty snapshot placeholders -- ino 2 --
# are left alone)
stamp_tree() {
    local t=$1 d=$2
    find "$d" -xdev -mindepth 1 \( -inum 256 -o -inum 2 \) -prune -o -exec touch -h -d "$t" -- {} +
    touch -h -d "$t" -- "$d"
}

# mark: a reference time; stamp_changed TIME DIR: stamp what changed since mark
mark() { touch "$TMP/marker"; sleep 0.05; }
stamp_changed() {
    local t=$1 d=$2
    find "$d" -xdev -mindepth 1 \( -inum 256 -o -inum 2 \) -prune -o -cnewer "$TMP/marker" \
        -exec touch -h -d "$t" -- {} +
    touch -h -d "$t" -- "$d"
}

T1="2021-01-02 03:04:05.123456789 UTC"
T2="2022-02-03 04:05:06.987654321 UTC"
T3="2023-03-04 05:06:07.000000001 UTC"
T4="2024-04-05 06:07:08.5 UTC"
T_TOP="2020-12-31 23:59:59.999999999 UTC"
T_OLD="1965-06-15 12:00:00.25 UTC"       # negative time_t
T_FUTURE="2100-01-01 00:00:00 UTC"       # beyond 2^32
LONG255=$(printf 'L%.0s' {1..255})

# ---------------------------------------------------------------------------
# image life cycle

# new_image NAME NDEV SIZE MOUNT_OPTS FEATURES [MKFS_ARGS...]
# Creates $RAW/devN.img, mkfs, attaches loops, mounts at $M (top level, subvolid=5).
new_image() {
    local name=$1 ndev=$2 size=$3 i dev
    CUR_MOUNT=noatime${4:+,$4}
    CUR_FEATURES=$5
    shift 5
    CUR=$name
    RAW="$RAWROOT/$name"
    M="$TMP/mnt/$name"
    mkdir -p "$RAW" "$M" "$STAGE/$name"
    IMGS=() DEVS=()
    local files=()
    for ((i = 1; i <= ndev; i++)); do
        truncate -s "$size" "$RAW/dev$i.img"
        IMGS+=("$RAW/dev$i.img")
        files+=("dev$i.img")
    done
    CUR_MKFS="-q -f -L $name${*:+ $*} ${files[*]}"
    log "$name: mkfs.btrfs $CUR_MKFS ($ndev x $size)"
    (cd "$RAW" && mkfs.btrfs -q -f -L "$name" "$@" "${files[@]}") >"$RAW/mkfs.log" 2>&1 ||
        { cat "$RAW/mkfs.log" >&2; die "$name: mkfs failed"; }
    local devopts=""
    for img in "${IMGS[@]}"; do
        dev=$(losetup -f --show "$img")
        LOOPS+=("$dev")
        DEVS+=("$dev")
        devopts+=",device=$dev"
    done
    [[ $ndev -gt 1 ]] || devopts=""
    mount -t btrfs -o "subvolid=5,$CUR_MOUNT$devopts" "${DEVS[0]}" "$M"
    MOUNTS+=("$M")
}

# detach the current image's loops (after umount)
release_devs() {
    local dev
    for dev in "${DEVS[@]}"; do
        btrfs device scan -u "$dev" >/dev/null 2>&1 || true
        losetup -d "$dev"
    done
    DEVS=()
}

# root_level SUBVOLID: root level of a subvolume tree of the mounted image
# (after sync; the block device cache is dropped first so progs read what is on disk)
root_level() {
    local dev
    sync
    for dev in "${DEVS[@]}"; do blockdev --flushbufs "$dev"; done
    py root-level "$1" "${DEVS[@]}"
}

# record_state: subvolume lists, manifests, inode map of the mounted fs
record_state() {
    local o="$STAGE/$CUR" id path
    btrfs subvolume list -p -u -q -R "$M" > "$o/subvolumes.txt"
    btrfs subvolume list -a -p -u -q -R "$M" > "$o/subvolumes-a.txt"
    py subvols "$M" > "$RAW/subvols.tsv"
    while IFS=$'\t' read -r id path; do
        if [[ $path == . ]]; then
            python3 "$MANIFEST_PY" "$M" > "$o/subvol-$id.manifest"
        else
            python3 "$MANIFEST_PY" "$M/$path" > "$o/subvol-$id.manifest"
        fi
    done < "$RAW/subvols.tsv"
    py inomap "$M" "$RAW/subvols.tsv" > "$RAW/inomap.tsv"
    CUR_DEFAULT=$(btrfs subvolume get-default "$M" | awk '{print $2}')
}

# finish_image [analyze options...]: scrub, remount ro, record, umount, analyze,
# compress, verify
finish_image() {
    sync
    log "$CUR: scrub"
    btrfs scrub start -B -r "$M" > "$RAW/scrub.log" 2>&1 || { cat "$RAW/scrub.log" >&2; die "$CUR: scrub failed"; }
    grep -q 'Error summary: *no errors found' "$RAW/scrub.log" || { cat "$RAW/scrub.log" >&2; die "$CUR: scrub errors"; }
    mount -o remount,ro "$M"
    record_state
    umount "$M"
    release_devs
    finalize_image "$@"
}

# finalize_image [analyze options...]: INFO + files.tsv, compress, verify
finalize_image() {
    local o="$STAGE/$CUR" i
    log "$CUR: analyze"
    py analyze "$o" "$RAW/inomap.tsv" "$RAW/subvols.tsv" \
        --set "devices=${#IMGS[@]}" --set "mkfs=$CUR_MKFS" --set "mount=$CUR_MOUNT" \
        --set "features=$CUR_FEATURES" --set "default_subvol=$CUR_DEFAULT" \
        --set "kernel=$(uname -r)" --set "btrfs_progs=$(btrfs --version | head -1 | awk '{print $2}')" \
        --expect "devices=${#IMGS[@]}" --expect "num_devices=${#IMGS[@]}" \
        "$@" "${IMGS[@]}"
    log "$CUR: compress"
    for ((i = 1; i <= ${#IMGS[@]}; i++)); do
        zstd -q -19 --long -T1 -f "$RAW/dev$i.img" -o "$o/dev$i.img.zst"
    done
    verify_image "$CUR"
    rm -f "${IMGS[@]}"
}

# verify_image NAME: decompress, dump-super checks, btrfs check --readonly
verify_image() {
    local name=$1 o="$STAGE/$1" v="$TMP/verify/$1" k i dev sup devid f
    local csum nodesize sectorsize fsid logroot
    csum=$(py info "$o/INFO" csum)
    nodesize=$(py info "$o/INFO" nodesize)
    sectorsize=$(py info "$o/INFO" sectorsize)
    fsid=$(py info "$o/INFO" fsid)
    logroot=$(py info "$o/INFO" log_root)
    k=$(py info "$o/INFO" devices)
    log "$name: verify ($k device(s))"
    mkdir -p "$v"
    local files=() vloops=()
    for ((i = 1; i <= k; i++)); do
        f="$o/dev$i.img.zst"
        [[ -f $f ]] || die "$name: missing $f"
        zstd -q -d --long=27 -f "$f" -o "$v/dev$i.img"
        files+=("$v/dev$i.img")
        sup=$(btrfs inspect-internal dump-super "$v/dev$i.img")
        grep -Eq '^magic[[:space:]]+_BHRfS_M \[match\]' <<<"$sup" || die "$name dev$i: bad magic"
        grep -Eq '^csum[[:space:]]+0x[0-9a-f]+ \[match\]' <<<"$sup" || die "$name dev$i: superblock csum mismatch"
        grep -Eq "^csum_type[[:space:]]+[0-9] \\(${csum}" <<<"$sup" || die "$name dev$i: csum_type is not $csum"
        grep -Eq "^nodesize[[:space:]]+$nodesize\$" <<<"$sup" || die "$name dev$i: nodesize is not $nodesize"
        grep -Eq "^sectorsize[[:space:]]+$sectorsize\$" <<<"$sup" || die "$name dev$i: sectorsize is not $sectorsize"
        grep -Eq "^num_devices[[:space:]]+$k\$" <<<"$sup" || die "$name dev$i: num_devices is not $k"
        grep -Eq "^fsid[[:space:]]+$fsid\$" <<<"$sup" || die "$name dev$i: fsid is not $fsid"
        grep -Eq "^log_root[[:space:]]+$logroot\$" <<<"$sup" || die "$name dev$i: log_root is not $logroot"
        devid=$(awk '$1 == "dev_item.devid" {print $2}' <<<"$sup")
        [[ $devid == "$i" ]] || die "$name: dev$i.img holds devid $devid"
    done
    if [[ $k -eq 1 ]]; then
        btrfs check --readonly --check-data-csum "${files[0]}" > "$v/check.log" 2>&1 ||
            { cat "$v/check.log" >&2; die "$name: btrfs check failed"; }
    else
        for f in "${files[@]}"; do
            dev=$(losetup -r -f --show "$f")
            LOOPS+=("$dev")
            vloops+=("$dev")
        done
        local rc=0
        btrfs check --readonly --check-data-csum "${vloops[0]}" > "$v/check.log" 2>&1 || rc=$?
        for dev in "${vloops[@]}"; do
            btrfs device scan -u "$dev" >/dev/null 2>&1 || true
            losetup -d "$dev"
        done
        [[ $rc -eq 0 ]] || { cat "$v/check.log" >&2; die "$name: btrfs check failed"; }
    fi
    ! grep -qi 'missing' "$v/check.log" || { cat "$v/check.log" >&2; die "$name: btrfs check: device missing"; }
    grep -q 'no error found' "$v/check.log" || { cat "$v/check.log" >&2; die "$name: btrfs check did not say 'no error found'"; }
    rm -rf "$v"
}

# ---------------------------------------------------------------------------
# content

# populate_mixed DIR SEED: the small mixed tree (phase 1)
populate_mixed() {
    local d=$1 s=$2
    (
        cd "$d"
        mkdir -p d1/d2/d3 "dir with space" empty-dir sticky
        : > empty
        printf 'x' > one
        gen text 100 "$s:small" > small.txt
        gen text 3000 "$s:med" > d1/med.txt
        gen text 70000 "$s:70k" > d1/d2/text70k
        gen random 65536 "$s:rnd" > d1/random64k
        gen repeat 200000 "$s:rep" > repeat200k
        gen text 40 "$s:deep" > d1/d2/d3/deep.txt
        # hardlinks: small.txt has 3 names, med.txt 2
        ln small.txt d1/small-link
        ln small.txt d1/d2/small-link2
        ln d1/med.txt med-hard
        # symlinks
        ln -s small.txt sym-rel
        ln -s /etc/passwd sym-abs
        ln -s does/not/exist dangling
        ln -s d1/d2 sym-dir
        ln -s "$(printf 'x%.0s' {1..1000})" sym-long
        # special files
        mkfifo fifo
        mknod chr c 1 3
        mknod blk b 7 200
        mksock sock
        # sparse: 4 MiB, data at 1 MiB (aligned) and 3 MiB+100 (unaligned), hole at the end
        truncate -s 4M sparse
        put sparse 1048576 text 4096 "$s:sp1"
        put sparse $((3 * 1048576 + 100)) text 5000 "$s:sp2"
        # prealloc: 1 MiB fallocated, 64 KiB written in the middle, 256 KiB beyond EOF
        fallocate -l 1M prealloc
        put prealloc 262144 text 65536 "$s:pre"
        fallocate -n -o 1M -l 256K prealloc
        # nodatasum (+C on an empty file, then write)
        : > nodatasum
        chattr +C nodatasum
        put nodatasum 0 text 20000 "$s:nds"
        # names
        gen text 10 "$s:n1" > "name with spaces"
        gen text 10 "$s:n2" > $'new\nline'
        gen text 10 "$s:n3" > $'non-utf8-\xff\xfe\x80'
        gen text 10 "$s:n4" > $'tab\there'
        gen text 10 "$s:n5" > 'ünïcødé-名前.txt'
        gen text 10 "$s:n6" > ./-dash-first
        gen text 10 "$s:n7" > "$LONG255"
        gen text 10 "$s:n8" > "dir with space/inner file"
        # owners and modes (chown before chmod/setcap: chown clears setuid and caps)
        chown 1000:1000 d1/med.txt
        chown 65534:65534 one
        chown -h 1234:5678 sym-rel
        chown 1000:100 d1
        chmod 4755 one
        chmod 2750 d1/d2
        chmod 1777 sticky
        chmod 0000 empty
        chmod 0600 d1/random64k
        # xattrs, ACLs, capability
        setfattr -n user.comment -v "hello world" small.txt
        setfattr -n user.empty small.txt
        setfattr -n user.bin -v 0x00ff0180 d1/med.txt
        py xattr repeat200k user.big random 2000 "$s:xbig"
        setfattr -n trusted.dirattr -v yes d1
        setfattr -h -n trusted.onlink -v 1 sym-rel
        setfacl -m u:1000:rw-,g:100:r-- d1/med.txt
        setfacl -d -m u:1000:rwx d1
        setcap cap_net_raw+ep d1/d2/text70k
    )
    stamp_tree "$T1" "$d"
    (
        cd "$d"
        stamp "$T_OLD" one d1/d2/d3
        stamp "$T_FUTURE" small.txt
        stamp "2019-05-06 07:08:09.000000001 UTC" sym-rel
    )
}

# mixed_changes2 DIR SEED: changes between snap1 and snap2
mixed_changes2() {
    local d=$1 s=$2
    mark
    (
        cd "$d"
        put repeat200k 50000 text 1000 "$s:ow"
        gen text 50 "$s:app" >> small.txt
        truncate -s 10000 d1/d2/text70k
        rm one d1/small-link
        mv d1/med.txt d1/renamed.txt
        mv "dir with space" "dir renamed"
        mv $'new\nline' d1/$'new\nline'
        gen text 5000 "$s:new2" > new-in-snap2
        mkdir -p newdir/sub
        gen text 10 "$s:ns" > newdir/sub/f
        chmod 0640 small.txt
        chown 42:42 d1/random64k
        setfattr -x user.empty small.txt
        setfattr -n user.comment -v changed small.txt
        rm sym-rel
        ln -s d1/renamed.txt sym-rel
        rm sparse
        mkdir sparse
        : > sparse/inner
        fallocate -p -o 8192 -l 16384 d1/random64k
    )
    stamp_changed "$T2" "$d"
}

# mixed_changes3 DIR SEED: changes after snap2 (final state of the writable subvolume)
mixed_changes3() {
    local d=$1 s=$2
    mark
    (
        cd "$d"
        rm -r newdir
        gen random 10000 "$s:p3" > phase3-file
        put d1/random64k 0 random 4096 "$s:p3b"
        ln d1/renamed.txt hard-again
        setfattr -x user.bin d1/renamed.txt
        mknod chr2 c 5 1
    )
    stamp_changed "$T3" "$d"
}

# top_files: a few entries in the top level (FS_TREE)
top_files() {
    gen text 1234 "$CUR:top" > "$M/top-file"
    mkdir -p "$M/top-dir"
    gen text 5000 "$CUR:top2" > "$M/top-dir/f"
}

# mixed_image: top files, vol (writable) + snap1, snap2 (read-only) with changes
mixed_image_content() {
    local s=$1
    top_files
    btrfs -q subvolume create "$M/vol"
    populate_mixed "$M/vol" "$s"
    btrfs -q subvolume snapshot -r "$M/vol" "$M/snap1"
    mixed_changes2 "$M/vol" "$s"
    btrfs -q subvolume snapshot -r "$M/vol" "$M/snap2"
    mixed_changes3 "$M/vol" "$s"
}

MIXED_FEATURES="snapshots,subvolume,files,dirs,symlinks,hardlinks,xattrs,acl,capability,fifo,chardev,blockdev,socket,sparse,prealloc,nodatasum,inline,odd-names,setuid,times"

# ---------------------------------------------------------------------------
# images

declare -A DESC

DESC[csum-crc32c]="crc32c (default features, 16K nodes = the nodesize-16k image); mixed tree in \`vol\` (rw) + ro snapshots \`snap1\`, \`snap2\` with renames/deletes/overwrites/xattr and mode changes in between"
build_csum-crc32c() {
    new_image csum-crc32c 1 128M "" "csum-crc32c,nodesize-16k,$MIXED_FEATURES" --csum crc32c
    mixed_image_content crc32c
    stamp_tree "$T_TOP" "$M"
    finish_image --expect csum=crc32c --expect nodesize=16384 --min extents_prealloc=1 --min files_nodatasum=1
}

DESC[csum-xxhash]="xxhash64; same mixed tree; \`-O ^no-holes\` so holes are explicit EXTENT_DATA items with disk_bytenr 0"
build_csum-xxhash() {
    new_image csum-xxhash 1 128M "" "csum-xxhash,explicit-holes,$MIXED_FEATURES" --csum xxhash -O ^no-holes
    mixed_image_content xxhash
    stamp_tree "$T_TOP" "$M"
    finish_image --expect csum=xxhash --min extents_hole=1
}

DESC[csum-sha256]="sha256; same mixed tree; \`-O quota\` (quota tree, qgroup items)"
build_csum-sha256() {
    new_image csum-sha256 1 128M "" "csum-sha256,quota,$MIXED_FEATURES" --csum sha256 -O quota
    mixed_image_content sha256
    stamp_tree "$T_TOP" "$M"
    finish_image --expect csum=sha256
}

DESC[csum-blake2]="blake2b-256; same mixed tree; \`-O block-group-tree\`"
build_csum-blake2() {
    new_image csum-blake2 1 128M "" "csum-blake2,block-group-tree,$MIXED_FEATURES" --csum blake2 -O block-group-tree
    mixed_image_content blake2
    stamp_tree "$T_TOP" "$M"
    finish_image --expect csum=blake2
}

DESC[nodesize-4k]="4K nodes; subvolume \`many\` (+ ro snapshot \`many-snap\`) grown until its fs tree root is level >= 2 (height >= 3): files of 2000 bytes (inline extents, ~1 per leaf); mixed tree in \`vol\` + ro \`snap1\`"
build_nodesize-4k() {
    new_image nodesize-4k 1 128M "" "nodesize-4k,tree-height-3,$MIXED_FEATURES" -n 4096
    top_files
    btrfs -q subvolume create "$M/vol"
    populate_mixed "$M/vol" n4k
    btrfs -q subvolume snapshot -r "$M/vol" "$M/snap1"
    btrfs -q subvolume create "$M/many"
    local id n=0 lvl
    id=$(btrfs inspect-internal rootid "$M/many")
    while :; do
        py manyfiles "$M/many/d$((n / 1000))" "$n" 200 2000 many
        n=$((n + 200))
        lvl=$(root_level "$id")
        log "nodesize-4k: $n files in many, root level $lvl"
        [[ $lvl -ge 2 ]] && break
        [[ $n -lt 6000 ]] || die "nodesize-4k: no level 2 root after $n files"
    done
    stamp_tree "$T1" "$M/many"
    btrfs -q subvolume snapshot -r "$M/many" "$M/many-snap"
    stamp_tree "$T_TOP" "$M"
    finish_image --expect nodesize=4096 --min fs_tree_height=3
}

DESC[nodesize-64k]="64K nodes (sectorsize 4K; 64K sectors do not mount on x86 with this kernel); \`many\` with enough files for a level-1 root; mixed tree in \`vol\` + ro \`snap1\`"
build_nodesize-64k() {
    new_image nodesize-64k 1 128M "" "nodesize-64k,tree-height-2,$MIXED_FEATURES" -n 65536
    top_files
    btrfs -q subvolume create "$M/vol"
    populate_mixed "$M/vol" n64k
    btrfs -q subvolume snapshot -r "$M/vol" "$M/snap1"
    btrfs -q subvolume create "$M/many"
    local id n=0 lvl
    id=$(btrfs inspect-internal rootid "$M/many")
    while :; do
        py manyfiles "$M/many" "$n" 200 10 many64
        n=$((n + 200))
        lvl=$(root_level "$id")
        log "nodesize-64k: $n files in many, root level $lvl"
        [[ $lvl -ge 1 ]] && break
        [[ $n -lt 4000 ]] || die "nodesize-64k: no level 1 root after $n files"
    done
    stamp_tree "$T1" "$M/many"
    btrfs -q subvolume snapshot -r "$M/many" "$M/many-snap"
    stamp_tree "$T_TOP" "$M"
    finish_image --expect nodesize=65536 --min fs_tree_height=2
}

DESC[profile-dup]="DUP data and metadata on one device (every block stored twice); mixed tree + 256 KiB random file in \`vol\` + ro \`snap1\`"
build_profile-dup() {
    new_image profile-dup 1 256M "" "dup,$MIXED_FEATURES" -m dup -d dup
    top_files
    btrfs -q subvolume create "$M/vol"
    populate_mixed "$M/vol" dup
    gen random 262144 dup:rnd > "$M/vol/random-256k"
    stamp "$T1" "$M/vol/random-256k" "$M/vol"
    btrfs -q subvolume snapshot -r "$M/vol" "$M/snap1"
    stamp_tree "$T_TOP" "$M"
    finish_image --expect data_profile=dup --expect metadata_profile=dup
}

DESC[profile-mixed]="mixed block groups (\`-M\`, DATA|METADATA chunks, 4K nodes), 64 MiB device (no superblock mirror); mixed tree in \`vol\` + ro \`snap1\`"
build_profile-mixed() {
    new_image profile-mixed 1 64M "" "mixed,no-sb-mirror,$MIXED_FEATURES" -M
    top_files
    btrfs -q subvolume create "$M/vol"
    populate_mixed "$M/vol" mixed
    btrfs -q subvolume snapshot -r "$M/vol" "$M/snap1"
    stamp_tree "$T_TOP" "$M"
    finish_image --expect mixed_block_groups=yes
}

# populate_raid DIR SEED
populate_raid() {
    local d=$1 s=$2
    (
        cd "$d"
        gen striped $((3 * 1048576 + 12345)) "$s:big" > big-striped
        gen random 163840 "$s:rnd" > random-160k
        gen text 500 "$s:inl" > small-inline
        gen text 5000 "$s:5k" > small-5k
        gen text 70000 "$s:70k" > text-70k
        mkdir dir
        for i in $(seq 1 20); do gen text $((i * 401)) "$s:f$i" > "dir/f$i"; done
        ln -s big-striped link
        ln small-5k dir/hardlink
    )
    stamp_tree "$T1" "$d"
}

raid_image() {
    local name=$1 prof=$2 ndev=$3 feat=$4 size=$5 min=${6:-}
    new_image "$name" "$ndev" "$size" "" "$feat,devices,snapshots,files,big-file,stripes,inline,symlinks,hardlinks" \
        -d "$prof" -m "$prof"
    top_files
    btrfs -q subvolume create "$M/vol"
    populate_raid "$M/vol" "$name"
    btrfs -q subvolume snapshot -r "$M/vol" "$M/snap1"
    mark
    put "$M/vol/big-striped" 1048576 striped 65536 "$name:ow"
    gen striped 300000 "$name:app" >> "$M/vol/big-striped"
    gen text 3000 "$name:new" > "$M/vol/new-after-snap1"
    stamp_changed "$T2" "$M/vol"
    btrfs -q subvolume snapshot -r "$M/vol" "$M/snap2"
    stamp_tree "$T_TOP" "$M"
    # shellcheck disable=SC2086
    finish_image --expect "data_profile=$prof" --expect "metadata_profile=$prof" $min
}

DESC[raid0]="RAID0 data+metadata, 2 devices; \`vol\`: 3 MiB striped-pattern file (see notes), 160 KiB random file, small/inline files; ro \`snap1\`, then a 64 KiB overwrite + append, ro \`snap2\`"
build_raid0() { raid_image raid0 raid0 2 raid0 128M; }
DESC[raid1]="RAID1 data+metadata, 2 devices; same content as raid0"
build_raid1() { raid_image raid1 raid1 2 raid1 128M; }
DESC[raid10]="RAID10 data+metadata, 4 devices; same content as raid0"
build_raid10() { raid_image raid10 raid10 4 raid10 128M; }
DESC[raid1c3]="RAID1C3 data+metadata, 3 devices; same content as raid0"
build_raid1c3() { raid_image raid1c3 raid1c3 3 raid1c3 128M; }
DESC[raid5]="RAID5 data+metadata, 3 devices (full stripe = 2 x 64 KiB data + parity); same content as raid0, data covers many full stripes (INFO raid56_full_stripes)"
build_raid5() { raid_image raid5 raid5 3 raid5,raid56 256M "--min raid56_full_stripes=8"; }
DESC[raid6]="RAID6 data+metadata, 4 devices (full stripe = 2 x 64 KiB data + P + Q); same content as raid0"
build_raid6() { raid_image raid6 raid6 4 raid6,raid56 256M "--min raid56_full_stripes=8"; }

# populate_compress DIR SEED: run on a compress-force mount
populate_compress() {
    local d=$1 s=$2 n
    (
        cd "$d"
        # inline extents: < 4 KiB files; compressible ones become INLINE COMPRESSED
        for n in 1 100 1000 2000 3000 4096; do gen repeat $n "$s:tiny$n" > "tiny-$n"; done
        gen text 1500 "$s:t1500" > small-text-1500
        gen random 1000 "$s:r1000" > small-random-1000      # inline, not compressed
        gen zero 65536 "$s:z" > zeros-64k
        gen text 307200 "$s:t300" > text-300k               # 3 compressed extents (128+128+44 KiB)
        gen repeat 1048576 "$s:r1m" > repeat-1m             # 8 x 128 KiB compressed extents
        gen random 163840 "$s:rnd" > random-160k            # incompressible: stored uncompressed
        for n in 0 1 2 3; do                                # 64 KiB text / 64 KiB random
            if ((n % 2)); then put mixed-256k $((n * 65536)) random 65536 "$s:mx$n"
            else put mixed-256k $((n * 65536)) text 65536 "$s:mx$n"; fi
        done
        truncate -s 1M sparse-compressed
        put sparse-compressed 524288 repeat 100000 "$s:sc"
        gen repeat 524288 "$s:ow" > overwritten
        gen repeat 1000 "$s:grow" > grow-from-inline
    )
    sync
    (
        cd "$d"
        # partially referenced compressed extents
        put overwritten 200000 text 5000 "$s:ow2"            # unaligned, in the middle of extent 2
        put overwritten 393216 repeat 65536 "$s:ow3"         # second half of extent 4
        xfs_io -f -c "reflink $d/text-300k 65536 0 16384" partial-reflink >/dev/null   # 16 KiB from the middle
        gen repeat 200000 "$s:grow2" >> grow-from-inline
    )
    stamp_tree "$T1" "$d"
}

compress_image() {
    local name=$1 alg=$2
    new_image "$name" 1 128M "compress-force=$alg" \
        "$alg,compress-force,inline-compressed,partial-compressed,incompressible,reflink,sparse,snapshots,inline" --csum crc32c
    top_files
    btrfs -q subvolume create "$M/vol"
    populate_compress "$M/vol" "$name"
    btrfs -q subvolume snapshot -r "$M/vol" "$M/snap1"
    mark
    put "$M/vol/repeat-1m" 300000 random 10000 "$name:c2"
    truncate -s 200000 "$M/vol/text-300k"
    cp --reflink=always "$M/vol/repeat-1m" "$M/vol/repeat-1m-clone"
    rm "$M/vol/tiny-100"
    stamp_changed "$T2" "$M/vol"
    btrfs -q subvolume snapshot -r "$M/vol" "$M/snap2"
    stamp_tree "$T_TOP" "$M"
    finish_image --min extents_inline_compressed=3 --min extents_partial_compressed=2 --min extents_compressed=10 \
        --min extents_reflinked=1
}

DESC[compress-zlib]="mounted compress-force=zlib: inline compressed files (<= 4 KiB), 300 KiB/1 MiB files in 128 KiB compressed extents, partially referenced compressed extents (middle overwrites, partial reflink), incompressible/zero/mixed data, sparse; ro \`snap1\`, changes, ro \`snap2\`"
build_compress-zlib() { compress_image compress-zlib zlib; }
DESC[compress-lzo]="same as compress-zlib with compress-force=lzo (per-sector LZO segments)"
build_compress-lzo() { compress_image compress-lzo lzo; }
DESC[compress-zstd]="same as compress-zlib with compress-force=zstd"
build_compress-zstd() { compress_image compress-zstd zstd; }

DESC[reflink-snapshots]="reflinks (whole \`cp --reflink\`, partial and same-file \`xfs_io reflink\`, dedupe, cross-subvolume); ro snapshots \`snap1..3\` of \`vol\` after changes; ro snapshot of a ro snapshot; rw snapshot \`snap2-rw\` changed and snapshotted again; nested subvolumes \`vol/nested\`, \`vol/nested/deeper\`, \`top-dir/sub-in-dir\`; \`doomed\` deleted (+ subvolume sync) while its ro snapshot survives; default subvolume set to \`vol\`"
build_reflink-snapshots() {
    new_image reflink-snapshots 1 128M "" "reflink,dedupe,snapshots,snapshot-of-snapshot,writable-snapshot,nested-subvolumes,deleted-subvolume,default-subvolume,sparse,hardlinks,symlinks,xattrs"
    local V="$M/vol" doomed_id
    top_files
    btrfs -q subvolume create "$V"
    gen text 1048576 rs:base > "$V/base-1m"
    gen text 300000 rs:other > "$V/other"
    cp --reflink=always "$V/base-1m" "$V/whole-clone"
    xfs_io -f -c "reflink $V/base-1m 131072 0 65536" -c "reflink $V/base-1m 786432 1048576 131072" "$V/partial-clone" >/dev/null
    gen text 1048576 rs:base > "$V/selfclone"      # same bytes, own extent (cat/cp would reflink)
    sync
    xfs_io -c "reflink $V/selfclone 0 524288 131072" "$V/selfclone" >/dev/null
    gen text 131072 rs:dd > "$V/dupe-a"
    gen text 131072 rs:dd > "$V/dupe-b"
    sync
    xfs_io -c "dedupe $V/dupe-a 0 0 131072" "$V/dupe-b" >/dev/null
    ln "$V/other" "$V/other-hardlink"
    ln -s base-1m "$V/link-to-base"
    setfattr -n user.tag -v reflinked "$V/whole-clone"
    btrfs -q subvolume create "$V/nested"
    gen text 262144 rs:n1 > "$V/nested/n1"
    btrfs -q subvolume create "$V/nested/deeper"
    gen text 1000 rs:d1 > "$V/nested/deeper/d1"
    cp --reflink=always "$V/nested/n1" "$V/from-nested"       # cross-subvolume clone
    btrfs -q subvolume create "$M/top-dir/sub-in-dir"
    gen text 2000 rs:sid > "$M/top-dir/sub-in-dir/file"
    stamp_tree "$T1" "$V"
    stamp_tree "$T1" "$V/nested"
    stamp_tree "$T1" "$V/nested/deeper"
    stamp_tree "$T1" "$M/top-dir/sub-in-dir"
    btrfs -q subvolume snapshot -r "$V" "$M/snap1"

    mark
    put "$V/base-1m" 400000 text 4096 rs:c2
    gen text 50000 rs:app >> "$V/whole-clone"
    rm "$V/partial-clone"
    gen text 3000 rs:new2 > "$V/new-after-snap1"
    stamp_changed "$T2" "$V"
    btrfs -q subvolume snapshot -r "$V" "$M/snap2"

    mark
    truncate -s 600000 "$V/base-1m"
    mkdir "$V/d"
    cp --reflink=always "$V/other" "$V/d/other-clone"
    xfs_io -f -c "reflink $V/base-1m 0 0 65536" -c "reflink $V/base-1m 65536 262144 65536" "$V/d/pieces" >/dev/null
    stamp_changed "$T3" "$V"
    btrfs -q subvolume snapshot -r "$V" "$M/snap3"

    btrfs -q subvolume snapshot -r "$M/snap1" "$M/snap1-again"      # ro snapshot of a ro snapshot
    btrfs -q subvolume snapshot "$M/snap2" "$M/snap2-rw"            # rw snapshot of a ro snapshot
    mark
    put "$M/snap2-rw/base-1m" 0 text 8192 rs:rw
    rm "$M/snap2-rw/whole-clone"
    gen text 777 rs:rwnew > "$M/snap2-rw/rw-only"
    stamp_changed "$T4" "$M/snap2-rw"
    btrfs -q subvolume snapshot -r "$M/snap2-rw" "$M/snap2-rw-ro"
    btrfs -q subvolume snapshot -r "$V/nested" "$M/nested-snap"

    # a deleted subvolume whose read-only snapshot survives
    btrfs -q subvolume create "$M/doomed"
    gen text 200000 rs:doomed > "$M/doomed/file"
    stamp_tree "$T1" "$M/doomed"
    btrfs -q subvolume snapshot -r "$M/doomed" "$M/doomed-snap"
    doomed_id=$(btrfs inspect-internal rootid "$M/doomed")
    btrfs -q subvolume delete "$M/doomed"
    btrfs subvolume sync "$M" >/dev/null
    btrfs subvolume set-default "$(btrfs inspect-internal rootid "$V")" "$M"
    stamp_tree "$T_TOP" "$M"
    stamp "$T_TOP" "$M/top-dir"
    finish_image --set "deleted_subvol=$doomed_id" --min extents_reflinked=3
    # the deleted subvolume must be gone for good
    [[ ",$(py info "$STAGE/$CUR/INFO" subvolumes)," != *",$doomed_id,"* ]] || die "deleted subvolume still listed"
}

DESC[logtree]="NOT cleanly unmounted: log_root != 0. Committed state = the manifests (\`vol\` rw, ro \`snap\`, top level); after the last commit, fsync-only writes (new file + overwrite in \`vol\`, new file in the top level) live only in the log tree; \`*.replayed.manifest\` = state after the kernel replayed the log (mount of a copy)"
build_logtree() {
    new_image logtree 1 128M "commit=3600" "log-tree,snapshots,files"
    top_files
    btrfs -q subvolume create "$M/vol"
    gen text 3000 log:a > "$M/vol/a"
    gen text 100 log:b > "$M/vol/b"
    stamp_tree "$T1" "$M/vol"
    btrfs -q subvolume snapshot -r "$M/vol" "$M/snap"
    stamp_tree "$T_TOP" "$M"
    sync
    btrfs scrub start -B -r "$M" > "$RAW/scrub.log" 2>&1 || { cat "$RAW/scrub.log" >&2; die "logtree: scrub failed"; }
    sync
    record_state                      # committed state (noatime: reading changes nothing)
    # fsync-only changes: these reach the disk as log tree items only
    xfs_io -f -c "pwrite -q -S 0x61 0 4096" -c fsync "$M/vol/fsynced-new"
    xfs_io -c "pwrite -q -S 0x62 0 2048" -c fsync "$M/vol/a"
    xfs_io -f -c "pwrite -q -S 0x63 0 8192" -c fsync "$M/top-fsynced"
    stamp "$T2" "$M/vol/fsynced-new" "$M/vol/a" "$M/top-fsynced"
    for f in "$M/vol/fsynced-new" "$M/vol/a" "$M/top-fsynced"; do xfs_io -c fsync "$f"; done
    # crash-consistent copy of the backing file, taken while still mounted
    cp --sparse=always "$RAW/dev1.img" "$RAW/crash.img"
    umount "$M"
    release_devs
    mv "$RAW/crash.img" "$RAW/dev1.img"
    local lr
    lr=$(btrfs inspect-internal dump-super "$RAW/dev1.img" | awk '$1 == "log_root" {print $2}')
    [[ $lr != 0 ]] || die "logtree: log_root is 0 in the copy"
    # what the kernel makes of it: replay on a scratch copy
    cp --sparse=always "$RAW/dev1.img" "$RAW/replay.img"
    local dev id path
    dev=$(losetup -f --show "$RAW/replay.img")
    LOOPS+=("$dev")
    DEVS=("$dev")
    mount -t btrfs -o subvolid=5,noatime "$dev" "$M"
    MOUNTS+=("$M")
    while IFS=$'\t' read -r id path; do
        if [[ $path == . ]]; then
            python3 "$MANIFEST_PY" "$M" > "$STAGE/$CUR/subvol-$id.replayed.manifest"
        else
            python3 "$MANIFEST_PY" "$M/$path" > "$STAGE/$CUR/subvol-$id.replayed.manifest"
        fi
    done < "$RAW/subvols.tsv"
    umount "$M"
    release_devs
    rm -f "$RAW/replay.img"
    grep -q 'fsynced-new' <<<"$(cut -f14 "$STAGE/$CUR/subvol-256.replayed.manifest")" ||
        die "logtree: replay did not produce vol/fsynced-new"
    if grep -q 'fsynced' "$STAGE/$CUR/subvol-256.manifest" "$STAGE/$CUR/subvol-5.manifest"; then
        die "logtree: fsynced files in the committed-state manifest"
    fi
    finalize_image --min log_root=1
}

# ---------------------------------------------------------------------------
# main

log "kernel $(uname -r), $(btrfs --version | head -1)"
for name in "${SELECTED[@]}"; do
    "build_$name"
    cd /
done

# write the README template, then replace outputs
mkdir -p "$OUT"
for name in "${SELECTED[@]}"; do
    rm -rf "${OUT:?}/$name"
    mv "$STAGE/$name" "$OUT/$name"
done
for name in "${ALL_IMAGES[@]}"; do printf '%s\t%s\n' "$name" "${DESC[$name]}"; done > "$TMP/desc.tsv"
cat > "$OUT/.README.tmpl" <<'EOF'
# testdata/images: real-kernel btrfs images for the offline reader

Generated by `testdata/make-images.sh` -- do not edit by hand. Regenerate everything with

    sudo testdata/make-images.sh

or a subset with `sudo ONLY="raid5 compress-lzo" testdata/make-images.sh` (other images are left
alone; the README is rewritten). Needs root, loop devices, btrfs in the kernel, btrfs-progs
>= 6.3, zstd, attr, acl, libcap2-bin, e2fsprogs, xfsprogs, python3. Runtime: a few minutes.

Generated with:

- kernel: `@KERNEL@`
- btrfs-progs: `@PROGS@`

Each image is made with the real kernel: `mkfs.btrfs` on sparse files, loop mount (top level,
`subvolid=5`, always `noatime`; multi-device mounts also pass `device=` for every loop device),
populate, snapshot, `btrfs scrub start -B -r` (must report no errors; this also checks RAID5/6
parity), `mount -o remount,ro`, record, `umount` (clean: `log_root` = 0, except `logtree`).
Then every device is compressed with `zstd -19 --long` (window log 27: libzstd's default decoder
limit accepts it; the CLI needs no flag, `--long=27` does no harm), decompressed again, and
checked: `dump-super` (magic, superblock csum, csum type, nodesize, sectorsize, num_devices,
fsid, log_root, devid N in devN) and `btrfs check --readonly --check-data-csum` (multi-device
images through read-only loop devices so progs can assemble all of them) must pass.

File contents are deterministic (seeded generators), file times are fixed with
`touch -h -d` (atime and mtime; ctime/otime cannot be set). UUIDs, fsid, generations,
inode numbers, bytenrs and ctimes differ between runs, so images are not byte-reproducible:
tests must take such values from INFO/subvolumes.txt/files.tsv, not hard-code them.

## Layout (the contract)

`<name>/` holds:

- `devN.img.zst`, N = 1..devices -- device image N holds btrfs devid N (single-device images
  have only `dev1.img.zst`).
- `INFO` -- `key=value` lines, no comments, in this order first:
  `devices` (k), `mkfs` (the exact `mkfs.btrfs` arguments, image files named `devN.img`),
  `mount` (mount options used while populating, besides `subvolid=5` and `device=`),
  `csum` (crc32c|xxhash|sha256|blake2), `nodesize`, `sectorsize`, `data_profile`,
  `metadata_profile` (from the chunk tree: single|dup|raid0|raid1|raid10|raid1c3|raid5|raid6;
  for mixed block groups both are the mixed chunks' profile), `features` (comma-separated tags
  of what the image exercises), `fs_tree_height` (max root level + 1 over FS_TREE and every
  subvolume, from the root tree's ROOT_ITEMs), `generation` and `fsid` (superblock).
  Then extra keys (ignore unknown ones): `label`, `num_devices`, `system_profile`,
  `mixed_block_groups` (yes|no), `log_root`, `log_root_level`, `root_level` (root tree),
  `subvolumes` (ids: 5 first, then `btrfs subvolume list` order), `ro_subvolumes`,
  `subvol_levels` (`id:level,...`), `incompat_flags`, `compat_ro_flags` (names as printed by
  dump-super), `default_subvol`, `deleted_subvol` (reflink-snapshots), `kernel`, `btrfs_progs`,
  and counts over all rows of files.tsv (so extents shared by snapshots count once per
  subvolume): `extents_inline`, `extents_inline_compressed`, `extents_regular` (non-hole),
  `extents_compressed`, `extents_partial_compressed` (compressed and extent_offset != 0 or
  num_bytes < ram_bytes), `extents_prealloc`, `extents_hole` (explicit holes, only without
  no-holes), `extents_reflinked` (disk extents referenced by >= 2 inodes of one subvolume),
  `files_nodatasum`, `raid56_full_stripes` (RAID5/6 data full stripes entirely covered by
  file extents).
- `subvolumes.txt` -- exact stdout of `btrfs subvolume list -p -u -q -R <mnt>` (final state);
  `subvolumes-a.txt` -- the same with `-a`.
- `subvol-<id>.manifest` -- `testdata/manifest.py <mnt>/<path>` for id 5 (the top level) and every
  subvolume/snapshot (format in manifest.py's docstring: TAB separated, hex paths, sorted by
  path bytes; type, mode, uid, gid, nlink, size, mtime, atime, sha256, symlink target, rdev,
  xattrs; nested subvolumes and snapshot placeholders appear as `# skipped-subvol` comments).
  Taken on the read-only remount, so writable subvolumes are stable too.
- `files.tsv` -- one row per file extent item (EXTENT_DATA) of every regular file of every
  subvolume listed, from `btrfs inspect-internal dump-tree -t <id>` of the unmounted image;
  TAB separated, first line a `#` header:
  `subvol ino nlink path_hex inode_flags file_offset type compression disk_bytenr
  disk_num_bytes extent_offset num_bytes ram_bytes inline_size path_repr`.
  `path_hex` is the smallest of the inode's paths (hex of the bytes relative to the subvolume
  root), `inode_flags` as dump-tree prints them (`none`, `NODATASUM|NODATACOW`, `PREALLOC`...),
  `type` inline|regular|prealloc|none (`none`: the file has no extent items, one row with
  `-`), `compression` none|zlib|lzo|zstd. For inline extents `disk_bytenr`,
  `disk_num_bytes`, `extent_offset`, `num_bytes` are `-`, `ram_bytes` is the decoded length
  and `inline_size` the stored (possibly compressed) length; for regular/prealloc extents
  `inline_size` is `-` (prealloc also has `ram_bytes` `-`); an explicit hole is a regular
  extent with `disk_bytenr` 0. `path_repr` is Python repr() of the path, for humans.
- `logtree` only: `subvol-<id>.replayed.manifest` -- the trees after the kernel replays the log.

## Images

Total size of testdata/images: @TOTAL@.

@TABLE@

"mixed tree" (csum-*, nodesize-*, profile-*): dirs, empty/1-byte/inline/3000-byte/70 KiB
text/64 KiB random/200 KiB repetitive files, hardlinks (nlink 3 and 2), relative/absolute/
dangling/dir/1000-byte symlinks, fifo, char and block device, socket, sparse 4 MiB file (data
at 1 MiB and at an unaligned 3 MiB+100, hole at the end), prealloc file (fallocated 1 MiB, 64
KiB written in the middle, 256 KiB preallocated beyond EOF with `fallocate -n` (keep size)), nodatasum file
(`chattr +C` on the empty file, then written), names with spaces, a newline, a tab,
non-UTF-8 bytes, UTF-8, a leading dash and 255 bytes, uid/gid other than 0, setuid/setgid/
sticky/0000 modes, user/trusted xattrs (incl. empty and 2000-byte values, one on a symlink),
POSIX access + default ACLs, a file capability, negative/after-2038/1-ns timestamps. `snap1`
is taken after that; then (in `vol`) overwrite in the middle, append to the hardlinked file,
truncate, unlink, renames (incl. a directory), new files/dirs, chmod/chown, xattr removal
and change, symlink retarget, file replaced by a directory, a punched hole; `snap2`; then
more changes that only the writable `vol` has.

Notes and limits:

- RAID images: `big-striped` is 3 MiB+12345 bytes (+300000 appended and 64 KiB overwritten
  at 1 MiB after `snap1`) of the `striped` pattern: a fixed 64 KiB pool of pseudo-random
  words repeated with period 64 KiB (= stripe_len), whose first 32 bytes in every 4 KiB block
  are replaced by a per-block sha256. Every 4 KiB block is unique (a reader that maps a block
  or stripe wrongly gets a different sha256, and csums catch it), but the data and the RAID5/6
  parity compress well; truly random data would make each RAID image several MiB.
  `random-160k` is real incompressible random data (more than one full stripe, random
  parity). The RAID5/6 devices are 256 MiB (with 128 MiB, scrub fails with ENOSPC).
- compress-force quirks worth knowing (real kernel behaviour, see files.tsv): with lzo even
  `tiny-1` (13 stored bytes for 1) and `small-random-1000` (1016 for 1000) are stored as
  LZO-compressed inline extents, i.e. inline_size > ram_bytes; zlib/zstd store those two
  uncompressed. The kernel's lzo compressor gives up on a 128 KiB chunk whose first pages
  grow, so `mixed-256k` starts with text (random first would give one plain 256 KiB extent).
  Incompressible data (`random-160k`) is stored uncompressed despite compress-force.
- sectorsize 64K could not be made: the kernel refuses to mount it on x86 (4K pages),
  "sectorsize 65536 not yet supported for page size 4096".
- `reflink-snapshots`: the deleted subvolume is removed completely (`btrfs subvolume sync`
  waits for the cleaner), so only a gap in the subvolume ids (INFO `deleted_subvol`) and the
  surviving snapshot `doomed-snap` (parent_uuid of a subvolume that no longer exists) remain.
  A half-deleted subvolume (ROOT_ITEM with refs 0 + ORPHAN item) is not included: the cleaner
  removes small trees too quickly for that to be reliable.
- `logtree` is a copy of the loop image file taken while mounted (`commit=3600` so no periodic
  commit interferes) after `xfs_io ... -c fsync` writes, i.e. what a crash right after the
  fsyncs leaves. Its manifests describe the committed state (what a reader that ignores the log
  must see); `*.replayed.manifest` what the kernel shows after log replay. `btrfs check`
  passes on it (progs checks log items but does not replay them).
EOF
py readme "$OUT" "$TMP/desc.tsv" "$(uname -r)" "$(btrfs --version | head -1)"
rm -f "$OUT/.README.tmpl"
log "done: $(du -sh "$OUT" | cut -f1) in $OUT"
