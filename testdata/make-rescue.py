#!/usr/bin/env python3
"""Make the damaged images of testdata/rescue/ for `rsend --rescue`.

Usage: sudo testdata/make-rescue.py [CASE...]

Each case is a real btrfs made by the kernel (mkfs.btrfs on sparse files,
loop mounts, a populated subvolume `vol` and its read-only snapshot `snap`),
unmounted cleanly and then damaged on purpose. Before the damage the script
records, on the intact filesystem:

  snap.manifest   testdata/manifest.py --links of the snapshot
  truth.json      what is destroyed (tree blocks, data sectors, a superblock,
                  which copies) and which files that touches: every inode
                  with an item in a destroyed tree block (with its paths and
                  item types), and the file byte ranges whose data or whose
                  checksums are destroyed
  *.img.zst       the damaged device images (zstd -19 --long=27)
  README.md       the cases, the kernel and btrfs-progs versions

Needs root, loop devices, btrfs in the kernel, btrfs-progs (btrfs,
btrfs-map-logical), zstd, attr (setfattr), e2fsprogs (filefrag), python3.
"""

import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "rescue")
MANIFEST_PY = os.path.join(HERE, "manifest.py")
SIZE = 256 << 20
SECTOR = 4096
NODESIZE = 4096
TIME = "2021-01-02 03:04:05.123456789"

TMP = None
MOUNTS = []
LOOPS = []
# Loop device -> the image file it was attached to (btrfs-map-logical names
# the devices of a mounted multi-device filesystem by their loop device).
BACKING = {}


def run(*cmd, check=True, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if check and r.returncode != 0:
        raise SystemExit(f"make-rescue: {' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def cleanup():
    for m in reversed(MOUNTS):
        subprocess.run(["umount", m], stderr=subprocess.DEVNULL)
    for l in LOOPS:
        subprocess.run(["losetup", "-d", l], stderr=subprocess.DEVNULL)
    if TMP and not any(m.startswith(TMP) for m in open("/proc/self/mounts").read().split()):
        shutil.rmtree(TMP, ignore_errors=True)


def mount(devs, mnt, opts):
    loops = [run("losetup", "--find", "--show", d).strip() for d in devs]
    LOOPS.extend(loops)
    BACKING.update(zip(loops, devs))
    os.makedirs(mnt, exist_ok=True)
    o = ",".join([opts] + [f"device={l}" for l in loops] if opts else [f"device={l}" for l in loops])
    run("mount", "-o", o, loops[0], mnt)
    MOUNTS.append(mnt)
    return loops


def umount(mnt):
    run("umount", mnt)
    MOUNTS.remove(mnt)
    for l in list(LOOPS):
        subprocess.run(["losetup", "-d", l], stderr=subprocess.DEVNULL)
        LOOPS.remove(l)


def populate(vol, nfiles, big, compressible=True):
    """A varied tree: directories, small (inline) and larger files, a
    symlink, hard links, xattrs, modes, owners, fixed times."""
    rnd = random.Random(nfiles * 7 + big)
    dirs = ["a", "b", "c/deep"]
    for d in dirs:
        os.makedirs(os.path.join(vol, d), exist_ok=True)
    paths = []
    for i in range(nfiles):
        d = dirs[i % len(dirs)]
        p = os.path.join(vol, d, f"f{i:05d}")
        size = [100, 1500, 5000, 20000, 70000][i % 5]
        word = f"{d}/f{i:05d} ".encode()
        data = (word * (size // len(word) + 1))[:size]
        with open(p, "wb") as f:
            f.write(data)
        paths.append(p)
        if i % 7 == 3:
            os.chmod(p, 0o600)
            os.chown(p, 1000, 1001)
        if i % 11 == 5:
            run("setfattr", "-n", "user.tag", "-v", f"t{i}", p)
    for i in range(big):
        p = os.path.join(vol, f"big{i}")
        with open(p, "wb") as f:
            for k in range(256):
                if compressible:
                    block = (f"big{i} block {k} ".encode() * 300)[:SECTOR]
                else:
                    block = rnd.randbytes(SECTOR)
                f.write(block)
        paths.append(p)
    os.makedirs(os.path.join(vol, "links"))
    for i, p in enumerate(paths[: min(len(paths), 40)]):
        if i % 13 == 4:
            os.link(p, os.path.join(vol, "links", f"l{i}"))
    os.symlink("a/f00000", os.path.join(vol, "sym"))
    run("setfattr", "-n", "user.dir", "-v", "top", vol)
    for root, ds, fs in os.walk(vol, topdown=False):
        for n in fs + ds:
            run("touch", "-h", "-d", TIME, os.path.join(root, n))
    run("touch", "-h", "-d", TIME, vol)


def dump_block(dev, logical):
    return run("btrfs", "inspect-internal", "dump-tree", "-b", str(logical), "--noscan", dev)


KEY = re.compile(r"key \((\S+) (\S+) (\S+)\)")


def block_keys(dev, logical):
    """The keys of a leaf, or (key, child logical) of a node; and its level."""
    text = dump_block(dev, logical)
    # (The first line may be the "btrfs-progs vX" banner.)
    head = next(l for l in text.splitlines() if l.startswith(("node ", "leaf ")))
    level = int(re.search(r"level (\d+)", head).group(1)) if head.startswith("node") else 0
    keys, children = [], []
    for line in text.splitlines():
        m = KEY.search(line)
        if not m:
            continue
        keys.append((m.group(1), m.group(2), m.group(3), line))
        b = re.search(r"block (\d+)", line)
        if b:
            children.append(int(b.group(1)))
    return level, keys, children


def items_under(dev, logical):
    """(objectid, type) of every item in the subtree at `logical`, and the
    leaves under it."""
    level, keys, children = block_keys(dev, logical)
    if level == 0:
        return [(k[0], k[1], k[2], k[3]) for k in keys], [logical]
    items, leaves = [], []
    for c in children:
        i, l = items_under(dev, c)
        items += i
        leaves += l
    return items, leaves


def tree_root(dev, tree):
    text = run("btrfs", "inspect-internal", "dump-tree", "-t", str(tree), "--noscan", dev)
    for line in text.splitlines():
        if line.startswith("node") or line.startswith("leaf"):
            return int(line.split()[1]), text
    raise SystemExit(f"no root for tree {tree}")


def tree_blocks(text):
    """(logical, level, item count) of every block in a dump-tree text."""
    out = []
    for line in text.splitlines():
        m = re.match(r"(node|leaf) (\d+) (?:level (\d+) )?items (\d+)", line)
        if m:
            out.append((int(m.group(2)), int(m.group(3) or 0), int(m.group(4))))
    return out


def copies(dev_paths, logical, length=SECTOR):
    """[(device path, physical)] of every copy of `logical`."""
    out = []
    text = run("btrfs-map-logical", "-l", str(logical), "-b", str(length), dev_paths[0])
    for line in text.splitlines():
        m = re.match(r"mirror (\d+) logical \d+ physical (\d+) device (\S+)", line)
        if m:
            out.append((BACKING.get(m.group(3), m.group(3)), int(m.group(2))))
    if not out:
        raise SystemExit(f"btrfs-map-logical found no copy of {logical}")
    return out


def destroy(path, physical, length, seed):
    rnd = random.Random(seed)
    with open(path, "r+b") as f:
        f.seek(physical)
        f.write(rnd.randbytes(length))


def resolve(mnt, ino):
    out = run("btrfs", "inspect-internal", "inode-resolve", str(ino), mnt, check=False)
    paths = []
    for line in out.splitlines():
        p = os.path.relpath(line.strip(), mnt)
        paths.append(p)
    return sorted(paths)


def extents(path):
    """[(file offset, logical, length, encoded)] from filefrag -v (4 KiB units)."""
    out = run("filefrag", "-v", "-b4096", path)
    ext = []
    for line in out.splitlines():
        m = re.match(r"\s*\d+:\s+(\d+)\.\.\s*(\d+):\s+(\d+)\.\.\s*(\d+):\s+(\d+):?.*", line)
        if m:
            lo, hi, p0 = int(m.group(1)), int(m.group(2)), int(m.group(3))
            ext.append((lo * SECTOR, p0 * SECTOR, (hi - lo + 1) * SECTOR, "encoded" in line))
    return ext


class Case:
    def __init__(self, name, mkfs, opts="", ndev=1, nfiles=300, big=4, compressible=True):
        self.name, self.mkfs, self.opts = name, mkfs, opts
        self.dir = os.path.join(TMP, name)
        os.makedirs(self.dir)
        self.devs = [os.path.join(self.dir, f"dev{i + 1}.img" if ndev > 1 else "image.img") for i in range(ndev)]
        for d in self.devs:
            with open(d, "wb") as f:
                f.truncate(SIZE)
        run("mkfs.btrfs", "-q", "-f", "-n", str(NODESIZE), *mkfs, *self.devs)
        self.mnt = os.path.join(self.dir, "mnt")
        mount(self.devs, self.mnt, opts)
        vol = os.path.join(self.mnt, "vol")
        run("btrfs", "subvolume", "create", vol)
        populate(vol, nfiles, big, compressible)
        run("btrfs", "subvolume", "snapshot", "-r", vol, os.path.join(self.mnt, "snap"))
        run("sync")
        self.snap = os.path.join(self.mnt, "snap")
        self.snapid = int(run("btrfs", "inspect-internal", "rootid", self.snap).strip())
        self.manifest = run("python3", MANIFEST_PY, "--links", self.snap)
        self.damage, self.affected, self.lossless = [], {}, False
        self.snapshot, self.parent = "snap", None

    def affect(self, ino, types=None, ranges=None):
        a = self.affected.setdefault(ino, {"ino": ino, "paths": resolve(self.snap, ino),
                                           "item_types": [], "data_ranges": []})
        for t in types or []:
            if t not in a["item_types"]:
                a["item_types"].append(t)
        a["data_ranges"] += ranges or []

    def lose_tree_block(self, logical, tree):
        items, leaves = items_under(self.devs[0], logical)
        level, keys, _ = block_keys(self.devs[0], logical)
        for obj, typ, off, _ in items:
            if obj.isdigit() and int(obj) >= 256 and tree != 7 and tree != 1:
                self.affect(int(obj), [typ])
        c = copies(self.devs, logical)
        self.damage.append({"what": "tree block", "tree": tree, "logical": logical, "level": level,
                            "copies": list(range(1, len(c) + 1)), "of": len(c),
                            "first_key": "(%s %s %s)" % keys[0][:3], "last_key": "(%s %s %s)" % keys[-1][:3],
                            "leaves_below": leaves if level > 0 else []})
        self.tree_targets = getattr(self, "tree_targets", []) + [(logical, c)]
        return items

    def lose_data(self, path, file_off, nsect, which):
        """Destroys `nsect` sectors of `path` from `file_off` on copies `which`."""
        for off, logical, length, encoded in extents(path):
            if off <= file_off < off + length:
                break
        else:
            raise SystemExit(f"{path}: no extent at {file_off}")
        at = logical + (file_off - off)
        c = copies(self.devs, at)
        self.damage.append({"what": "data", "logical": at, "len": nsect * SECTOR,
                            "copies": which, "of": len(c), "path": os.path.relpath(path, self.snap)})
        self.data_targets = getattr(self, "data_targets", []) + [(c[w - 1], nsect * SECTOR) for w in which]
        return at, c

    def finish(self):
        umount(self.mnt)
        seed = 1
        for logical, cs in getattr(self, "tree_targets", []):
            for dev, phys in cs:
                destroy(dev, phys, NODESIZE, seed)
                seed += 1
        for (dev, phys), n in getattr(self, "data_targets", []):
            destroy(dev, phys, n, seed)
            seed += 1
        for dev, phys, n in getattr(self, "raw_targets", []):
            destroy(dev, phys, n, seed)
            seed += 1
        out = os.path.join(OUT, self.name)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        with open(os.path.join(out, "snap.manifest"), "w") as f:
            f.write(self.manifest)
        names = [os.path.basename(d) for d in self.devs]
        truth = {"case": self.name, "snapshot": self.snapshot, "parent": self.parent,
                 "snapshot_id": self.snapid, "devices": names,
                 "mkfs": " ".join(self.mkfs), "mount": self.opts, "damage": self.damage,
                 "lossless": self.lossless,
                 "affected": [self.affected[k] for k in sorted(self.affected)]}
        for a in truth["affected"]:
            a["path"] = a["paths"][0] if a["paths"] else None
        with open(os.path.join(out, "truth.json"), "w") as f:
            json.dump(truth, f, indent=1)
            f.write("\n")
        for d in self.devs:
            run("zstd", "-q", "-19", "--long=27", "-f", d, "-o", os.path.join(out, os.path.basename(d) + ".zst"))
        print(f"{self.name}: {len(self.damage)} damaged, {len(self.affected)} inodes touched", file=sys.stderr)


def incremental():
    """An incremental send: `snap` is the parent, `snap2` the snapshot
    after changes; a leaf of snap2's tree that snap does not share is lost."""
    c = Case("incremental", ["-m", "single", "-d", "single"], nfiles=300, big=2)
    vol = os.path.join(c.mnt, "vol")
    for i in range(0, 300, 3):
        p = os.path.join(vol, ["a", "b", "c/deep"][i % 3], f"f{i:05d}")
        with open(p, "ab") as f:
            f.write(b"changed after the parent\n")
        run("touch", "-h", "-d", TIME, p)
    for i in range(20):
        with open(os.path.join(vol, "b", f"new{i:03d}"), "wb") as f:
            f.write(b"new in snap2\n" * (i + 1))
    for i in range(1, 60, 9):
        os.unlink(os.path.join(vol, ["a", "b", "c/deep"][i % 3], f"f{i:05d}"))
    for d in ["", "a", "b", "c", "c/deep"]:
        run("touch", "-h", "-d", TIME, os.path.join(vol, d))
    snap2 = os.path.join(c.mnt, "snap2")
    run("btrfs", "subvolume", "snapshot", "-r", vol, snap2)
    run("sync")
    c.snap, c.snapshot, c.parent = snap2, "snap2", "snap"
    c.snapid = int(run("btrfs", "inspect-internal", "rootid", snap2).strip())
    c.manifest = run("python3", MANIFEST_PY, "--links", snap2)
    _, parent_text = tree_root(c.devs[0], int(run("btrfs", "inspect-internal", "rootid",
                                                    os.path.join(c.mnt, "snap")).strip()))
    shared = {b[0] for b in tree_blocks(parent_text)}
    _, text = tree_root(c.devs[0], c.snapid)
    leaves = [b for b in tree_blocks(text) if b[1] == 0 and b[0] not in shared]
    c.lose_tree_block(middle(leaves, lambda b: files_only(c, b))[0], c.snapid)
    c.finish()


def files_only(c, b):
    """Whether block `b` holds items of three inodes or more, none of them
    the root directory's."""
    _, keys, _ = block_keys(c.devs[0], b[0])
    objs = {k[0] for k in keys}
    return "256" not in objs and len(objs) >= 3


def middle(blocks, pred):
    cands = [b for b in blocks if pred(b)]
    if not cands:
        raise SystemExit("no block to damage")
    return cands[len(cands) // 2]


def fs_leaf():
    c = Case("fs-leaf", ["-m", "single", "-d", "single"])
    _, text = tree_root(c.devs[0], c.snapid)
    leaves = [b for b in tree_blocks(text) if b[1] == 0]
    c.lose_tree_block(middle(leaves, lambda b: files_only(c, b))[0], c.snapid)
    c.finish()


def fs_node():
    c = Case("fs-node", ["-m", "single", "-d", "single"], nfiles=2500, big=2)
    root, text = tree_root(c.devs[0], c.snapid)
    nodes = [b for b in tree_blocks(text) if b[1] == 1]
    if not nodes or tree_blocks(text)[0][1] < 2:
        raise SystemExit("fs-node: the tree is not deep enough")

    def no_root_dir(b):
        items, _ = items_under(c.devs[0], b[0])
        return all(o != "256" for o, *_ in items)
    c.lose_tree_block(middle(nodes, no_root_dir)[0], c.snapid)
    c.finish()


def data_case(name, mkfs, ndev=1, which=(1,), lossless=False):
    c = Case(name, mkfs, ndev=ndev, nfiles=60, big=3)
    for path, off, n in [("big1", 40960, 2), ("big2", 0, 1)]:
        p = os.path.join(c.snap, path)
        ino = os.stat(p).st_ino
        c.lose_data(p, off, n, list(which))
        if not lossless:
            c.affect(ino, ranges=[[off, n * SECTOR]])
    c.lossless = lossless
    c.finish()


def compressed():
    c = Case("compressed", ["-m", "single", "-d", "single"], opts="compress-force=zstd", nfiles=60, big=3)
    p = os.path.join(c.snap, "big1")
    ext = [e for e in extents(p) if e[3]]
    off, logical, length, _ = ext[1]
    # The first sector of the second compressed extent (filefrag gives its
    # disk start and the file range it backs): all that range is lost.
    cs = copies(c.devs, logical)
    c.damage.append({"what": "data", "logical": logical, "len": SECTOR, "copies": [1], "of": len(cs),
                     "path": "big1", "compressed_extent": logical})
    c.data_targets = [(cs[0], SECTOR)]
    c.affect(os.stat(p).st_ino, ranges=[[off, length]])
    c.finish()


def csum_tree():
    c = Case("csum-tree", ["-m", "single", "-d", "single"], nfiles=60, big=24)
    _, text = tree_root(c.devs[0], 7)
    leaves = [b for b in tree_blocks(text) if b[1] == 0]
    if len(leaves) < 3:
        raise SystemExit("csum-tree: too few checksum leaves")
    leaf = leaves[len(leaves) // 2][0]
    level, keys, _ = block_keys(c.devs[0], leaf)
    covered = []
    for obj, typ, off, line in keys:
        size = int(re.search(r"itemsize (\d+)", line).group(1))
        covered.append((int(off), int(off) + size // 4 * SECTOR))
    c.lose_tree_block(leaf, 7)
    # The files whose data these checksums cover: read unverified.
    for root, ds, fs in os.walk(c.snap):
        for n in fs:
            p = os.path.join(root, n)
            if os.path.islink(p):
                continue
            for off, logical, length, _ in extents(p):
                for a, z in covered:
                    lo, hi = max(a, logical), min(z, logical + length)
                    if lo < hi:
                        size = os.stat(p).st_size
                        start = off + (lo - logical)
                        end = min(off + (hi - logical), -(-size // SECTOR) * SECTOR)
                        if start < end:
                            c.affect(os.stat(p).st_ino, ranges=[[start, end - start]])
    c.csum_lost = covered
    c.finish()


def root_tree():
    c = Case("root-tree", ["-m", "single", "-d", "single"], nfiles=60, big=2)
    # One more commit after the snapshot, so a backup root still holds it.
    with open(os.path.join(c.mnt, "vol", "after"), "w") as f:
        f.write("after the snapshot\n")
    run("sync")
    super_text = run("btrfs", "inspect-internal", "dump-super", "-f", c.devs[0])
    root = int(re.search(r"^root\s+(\d+)", super_text, re.M).group(1))
    level, keys, _ = block_keys(c.devs[0], root)
    cs = copies(c.devs, root)
    c.damage.append({"what": "tree block", "tree": 1, "logical": root, "level": level,
                     "copies": list(range(1, len(cs) + 1)), "of": len(cs), "first_key": None})
    c.tree_targets = [(root, cs)]
    c.finish()


def superblock():
    c = Case("superblock", ["-m", "single", "-d", "single"], nfiles=60, big=2)
    c.damage.append({"what": "superblock", "physical": 65536})
    c.raw_targets = [(c.devs[0], 65536, 4096)]
    c.lossless = True
    c.finish()


CASES = {
    "fs-leaf": fs_leaf,
    "fs-node": fs_node,
    "data-single": lambda: data_case("data-single", ["-m", "single", "-d", "single"]),
    "data-dup": lambda: data_case("data-dup", ["-m", "dup", "-d", "dup"], lossless=True),
    "data-raid1": lambda: data_case("data-raid1", ["-m", "raid1", "-d", "raid1"], ndev=2, lossless=True),
    "root-tree": root_tree,
    "superblock": superblock,
    "csum-tree": csum_tree,
    "compressed": compressed,
    "incremental": incremental,
}


def readme():
    kernel = os.uname().release
    progs = run("btrfs", "--version").strip().splitlines()[0]
    lines = [
        "# testdata/rescue: damaged kernel-made images for `rsend --rescue`",
        "",
        "Generated by `testdata/make-rescue.py` (as root: `sudo testdata/make-rescue.py [CASE...]`);",
        "do not edit by hand. Each directory holds the damaged device images (`*.img.zst`),",
        "`snap.manifest` (the intact snapshot, `testdata/manifest.py --links`) and `truth.json`",
        "(what was destroyed and which files it touched, read from the intact filesystem).",
        "",
        f"- kernel: `{kernel}`",
        f"- btrfs-progs: `{progs}`",
        "",
        "| case | filesystem | damage |",
        "|---|---|---|",
    ]
    for name in sorted(os.listdir(OUT)):
        t = os.path.join(OUT, name, "truth.json")
        if not os.path.exists(t):
            continue
        truth = json.load(open(t))
        dmg = "; ".join(
            f"{d['what']} at logical {d.get('logical', d.get('physical'))}"
            + (f" (tree {d['tree']}, level {d['level']})" if d["what"] == "tree block" else "")
            + (f", copies {d['copies']} of {d['of']}" if "of" in d else "")
            for d in truth["damage"])
        lines.append(f"| `{name}` | `mkfs.btrfs {truth['mkfs']}`{' -o ' + truth['mount'] if truth['mount'] else ''} | {dmg} |")
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    global TMP
    if os.geteuid() != 0:
        raise SystemExit("make-rescue: must run as root")
    os.makedirs(OUT, exist_ok=True)
    wanted = sys.argv[1:] or list(CASES)
    TMP = tempfile.mkdtemp(prefix="make-rescue.")
    try:
        for name in wanted:
            CASES[name]()
        readme()
    finally:
        cleanup()


if __name__ == "__main__":
    main()
