#!/usr/bin/env python3
"""Independent oracle for `rsend --changes -p OLD NEW --json`.

Usage: changes_oracle.py [--old OLD_ROOT] --new NEW_ROOT --device DEV

OLD_ROOT and NEW_ROOT are mounted read-only btrfs snapshots; DEV is the
block device (or image file) of that filesystem.  The listing of what
changed from OLD to NEW is computed from the trees as the mounted kernel
shows them (os.lstat, os.scandir, xattrs, file contents) plus the inode
generations from `btrfs inspect-internal dump-tree`; it never looks at a
send stream.  Without --old every inode of NEW is "created".

Output: one JSON object per line (keys change, path, [from], type, [what]),
sorted by the raw bytes of path, then change (deleted, unlinked, renamed,
created, linked, modified), then the raw bytes of from.  Paths are relative
to the snapshot root (the root itself is "."), a JSON string when they are
valid UTF-8, else {"hex": "..."}.

Rules.  An inode's identity is (inode number, generation), the generation
from the INODE_ITEMs of `dump-tree -t ROOTID` (ROOTID from `btrfs
inspect-internal rootid`); an inode number that comes back with another
generation is one deleted and one created inode.  Its names are the set of
(identity of the parent directory, name bytes).  Nested subvolumes (another
st_dev) and their placeholders in snapshots (directories other than the root
with inode number 256 or 2) are neither listed nor entered; inodes no path
reaches (orphans with no links) are not seen at all.

- created: identity only in NEW, one record per path in NEW; deleted:
  identity only in OLD, one per path in OLD.
- identity in both: lost = OLD names - NEW names, gained = NEW - OLD.  One
  lost and one gained: one renamed (from = the lost name's OLD path, path =
  the gained name's NEW path); else one unlinked per lost name (OLD path)
  and one linked per gained name (NEW path).
- identity in both: what = those of data (regular files: content or size),
  mode (st_mode & 0o7777, not for symlinks), owner (uid or gid), xattrs (all
  names and values), flags (files and directories: the inode flags
  FS_IOC_GETFLAGS gives, of those chattr sets: sync, immutable, append,
  nodump, noatime, compress, nocow, nocompress, dirsync), mtime
  (st_mtime_ns), target (symlinks), rdev (char and block devices) that
  differ; atime and ctime never count.  If any, one modified record per path
  in NEW.
- type is the NEW inode's, the OLD one's for deleted and unlinked.

Standard library only.
"""

import argparse
import array
import fcntl
import hashlib
import json
import os
import re
import stat
import subprocess
import sys

CHUNK = 1 << 20

# FS_IOC_GETFLAGS: _IOR('f', 1, long), which moves an int.
FS_IOC_GETFLAGS = (2 << 30) | (array.array("l").itemsize << 16) | (ord("f") << 8) | 1
# FS_SYNC_FL | FS_IMMUTABLE_FL | FS_APPEND_FL | FS_NODUMP_FL | FS_NOATIME_FL |
# FS_COMPR_FL | FS_NOCOW_FL | FS_NOCOMP_FL | FS_DIRSYNC_FL: what chattr sets
# on btrfs (not FS_VERITY_FL, which fs-verity sets).
CHATTR_FLAGS = 0x8 | 0x10 | 0x20 | 0x40 | 0x80 | 0x4 | 0x00800000 | 0x400 | 0x10000

RANK = {"deleted": 0, "unlinked": 1, "renamed": 2, "created": 3, "linked": 4, "modified": 5}

TYPES = {
    stat.S_IFREG: "file",
    stat.S_IFDIR: "dir",
    stat.S_IFLNK: "symlink",
    stat.S_IFIFO: "fifo",
    stat.S_IFSOCK: "socket",
    stat.S_IFCHR: "chardev",
    stat.S_IFBLK: "blockdev",
}

# "item 4 key (257 INODE_ITEM 0) itemoff 15217 itemsize 160", then
# "generation 9 transid 11 size 98 nbytes 0".  Names in dump-tree output are
# escaped (\n, \377 ...), so a name cannot fake either line.
ITEM_RE = re.compile(rb"^\s*item \d+ key \((\d+) INODE_ITEM 0\) itemoff \d+ itemsize \d+\s*$")
GEN_RE = re.compile(rb"^\s*generation (\d+) transid ")


def die(msg):
    sys.stderr.write("changes_oracle.py: %s\n" % msg)
    sys.exit(1)


def root_id(root):
    out = subprocess.run(["btrfs", "inspect-internal", "rootid", root],
                         check=True, stdout=subprocess.PIPE).stdout
    return int(out.strip())


def generations(device, rootid):
    """{inode number: generation} of every INODE_ITEM of tree ROOTID."""
    gens = {}
    proc = subprocess.Popen(["btrfs", "inspect-internal", "dump-tree", "-t", str(rootid), device],
                            stdout=subprocess.PIPE, bufsize=CHUNK)
    pending = None
    for line in proc.stdout:
        if pending is not None:
            m = GEN_RE.match(line)
            if not m:
                die("dump-tree: INODE_ITEM of %d not followed by its generation: %r" % (pending, line))
            gen = int(m.group(1))
            if gens.setdefault(pending, gen) != gen:
                die("dump-tree: inode %d of tree %d has two generations" % (pending, rootid))
            pending = None
            continue
        if b"INODE_ITEM 0) itemoff" in line:
            m = ITEM_RE.match(line)
            if m:
                pending = int(m.group(1))
    if proc.wait() != 0:
        die("btrfs inspect-internal dump-tree -t %d %s failed" % (rootid, device))
    if pending is not None:
        die("dump-tree: output ends after the INODE_ITEM of %d" % pending)
    return gens


class Inode:
    __slots__ = ("ino", "paths", "names", "type", "perm", "uid", "gid", "mtime_ns",
                 "size", "rdev", "xattrs", "flags", "target", "abspath", "_sha")

    def __init__(self, st, abspath):
        self.ino = st.st_ino
        self.paths = []
        self.names = set()
        fmt = stat.S_IFMT(st.st_mode)
        if fmt not in TYPES:
            die("%r: unknown file type %o" % (abspath, fmt))
        self.type = TYPES[fmt]
        self.perm = st.st_mode & 0o7777
        self.uid = st.st_uid
        self.gid = st.st_gid
        self.mtime_ns = st.st_mtime_ns
        self.size = st.st_size
        self.rdev = st.st_rdev if self.type in ("chardev", "blockdev") else None
        self.abspath = abspath
        self.xattrs = {n: os.getxattr(abspath, n, follow_symlinks=False)
                       for n in os.listxattr(abspath, follow_symlinks=False)}
        self.target = os.readlink(abspath) if self.type == "symlink" else None
        self.flags = inode_flags(abspath, self.type)
        self._sha = None

    def sha256(self):
        """The content's sha256, read once, when first asked for."""
        if self._sha is None:
            h = hashlib.sha256()
            fd = os.open(self.abspath, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NOATIME", 0))
            try:
                while True:
                    b = os.read(fd, CHUNK)
                    if not b:
                        break
                    h.update(b)
            finally:
                os.close(fd)
            self._sha = h.digest()
        return self._sha


def inode_flags(abspath, typ):
    """The chattr flags of a file or directory (FS_IOC_GETFLAGS); None for
    other types (chattr cannot set any on them)."""
    if typ not in ("file", "dir"):
        return None
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_NOATIME", 0)
    if typ == "dir":
        flags |= os.O_DIRECTORY
    fd = os.open(abspath, flags)
    try:
        buf = array.array("i", [0])
        fcntl.ioctl(fd, FS_IOC_GETFLAGS, buf, True)
    finally:
        os.close(fd)
    return buf[0] & CHATTR_FLAGS


def walk(root, device):
    """{identity: Inode} of everything reachable from ROOT in one subvolume."""
    gens = generations(device, root_id(root))
    broot = os.fsencode(root)
    rst = os.lstat(broot)
    if not stat.S_ISDIR(rst.st_mode):
        die("%s is not a directory" % root)
    dev = rst.st_dev

    def ident(st, where):
        try:
            return (st.st_ino, gens[st.st_ino])
        except KeyError:
            die("%r: inode %d has no INODE_ITEM in dump-tree" % (where, st.st_ino))

    inodes = {}
    rid = ident(rst, broot)
    node = Inode(rst, broot)
    node.paths.append(b".")
    inodes[rid] = node
    stack = [(broot, b"", rid)]
    while stack:
        absdir, reldir, did = stack.pop()
        with os.scandir(absdir) as it:
            entries = [(e.name, e.path) for e in it]
        for name, abspath in entries:
            st = os.lstat(abspath)
            if st.st_dev != dev:
                continue  # a nested subvolume (live mount of a subvolume)
            isdir = stat.S_ISDIR(st.st_mode)
            if isdir and st.st_ino in (256, 2):
                continue  # a nested subvolume's root or its placeholder in a snapshot
            rel = reldir + name
            iid = ident(st, abspath)
            node = inodes.get(iid)
            if node is None:
                node = inodes[iid] = Inode(st, abspath)
            node.paths.append(rel)
            node.names.add((did, name))
            if isdir:
                stack.append((abspath, rel + b"/", iid))
    return inodes


def dir_path(inodes, did):
    return inodes[did].paths[0]


def name_path(inodes, name):
    """The path of NAME = (parent identity, name bytes) in the tree INODES."""
    did, base = name
    parent = dir_path(inodes, did)
    return base if parent == b"." else parent + b"/" + base


def changes(old, new):
    recs = []  # (change, path, from, type, what)
    for iid, n in new.items():
        o = old.get(iid)
        if o is None:
            recs.extend(("created", p, None, n.type, None) for p in n.paths)
            continue
        lost = o.names - n.names
        gained = n.names - o.names
        if len(lost) == 1 and len(gained) == 1:
            recs.append(("renamed", name_path(new, next(iter(gained))),
                         name_path(old, next(iter(lost))), n.type, None))
        else:
            recs.extend(("unlinked", name_path(old, x), None, o.type, None) for x in lost)
            recs.extend(("linked", name_path(new, x), None, n.type, None) for x in gained)
        what = []
        if n.type == "file" and (o.size != n.size or o.sha256() != n.sha256()):
            what.append("data")
        if n.type != "symlink" and o.perm != n.perm:
            what.append("mode")
        if o.uid != n.uid or o.gid != n.gid:
            what.append("owner")
        if o.xattrs != n.xattrs:
            what.append("xattrs")
        if o.flags != n.flags:
            what.append("flags")
        if o.mtime_ns != n.mtime_ns:
            what.append("mtime")
        if n.type == "symlink" and o.target != n.target:
            what.append("target")
        if n.type in ("chardev", "blockdev") and o.rdev != n.rdev:
            what.append("rdev")
        if what:
            recs.extend(("modified", p, None, n.type, what) for p in n.paths)
    for iid, o in old.items():
        if iid not in new:
            recs.extend(("deleted", p, None, o.type, None) for p in o.paths)
    recs.sort(key=lambda r: (r[1], RANK[r[0]], r[2] or b""))
    return recs


def jbytes(b):
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return {"hex": b.hex()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", help="the old (parent) snapshot's root")
    ap.add_argument("--new", required=True, help="the new snapshot's root")
    ap.add_argument("--device", required=True, help="block device or image of the filesystem")
    a = ap.parse_args()
    old = walk(a.old, a.device) if a.old else {}
    new = walk(a.new, a.device)
    out = sys.stdout.buffer
    for change, path, frm, typ, what in changes(old, new):
        obj = {"change": change, "path": jbytes(path)}
        if frm is not None:
            obj["from"] = jbytes(frm)
        obj["type"] = typ
        if what is not None:
            obj["what"] = what
        out.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n")
    out.flush()


if __name__ == "__main__":
    main()
