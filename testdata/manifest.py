#!/usr/bin/env python3
"""Write a manifest of a directory tree (normally a read-only btrfs snapshot).

Usage: manifest.py [--links] ROOT > NAME.manifest

Used by testdata/make-kernel-streams.sh; later tests compare a received tree
against it.  Output format (one line per inode path, TAB separated, sorted by
the raw bytes of the relative path):

  path_hex  type  mode  uid  gid  nlink  size  mtime  atime  sha256  target_hex  rdev  xattrs  path_repr

  path_hex    hex of the path bytes relative to ROOT, no leading "./";
              the root itself is "." (hex 2e)
  type        reg | dir | lnk | chr | blk | fifo | sock
  mode        permission bits incl. setuid/setgid/sticky (st_mode & 07777), 4 octal digits
  uid, gid    decimal
  nlink       decimal; "-" for directories (btrfs always reports 1; other fs differ)
  size        st_size for reg and lnk; "-" for everything else (dir sizes are fs specific)
  mtime/atime "SEC.NSEC" as in struct timespec: SEC may be negative, NSEC is always
              9 digits in [0, 1e9)
  sha256      hex digest of the content for reg, else "-"
  target_hex  hex of the symlink target bytes for lnk, else "-"
  rdev        "MAJOR:MINOR" (decimal) for chr/blk, else "-"
  xattrs      "-" if none, else ";"-joined "name=VALUEHEX" sorted by name bytes; an
              empty value is written as "name=" (names are plain printable ASCII)
  path_repr   Python repr() of the path bytes, for humans only (never contains a TAB)

Lines starting with "#" are comments.  "# skipped-subvol <path_hex> <repr>" records a
nested subvolume (or its empty placeholder in a snapshot); send skips those entries,
so they are not part of the tree.  They are told by inode number (256 or 2) only when
ROOT is on btrfs: elsewhere those are ordinary inode numbers; a directory on another
device is skipped everywhere.  ctime is not recorded (receive cannot set it).

With --links the manifest also names the hard-link groups: one comment line
"# hardlinks <path_hex> <path_hex>..." per non-directory inode reached by more than one
path, its paths sorted by their bytes, the lines sorted; they follow the skipped-subvol
lines.  Without it the output is what it always was (the manifests under testdata/images
and testdata/kernel have no such lines).
"""
import hashlib
import os
import stat
import subprocess
import sys

BTRFS_EMPTY_SUBVOL_DIR_OBJECTID = 2
BTRFS_FIRST_FREE_OBJECTID = 256
BTRFS_SUPER_MAGIC = "9123683e"


def on_btrfs(path):
    """Whether path is on btrfs (statfs f_type); assumed so when unknown."""
    try:
        out = subprocess.run(["stat", "-f", "-c", "%t", os.fsdecode(path)],
                             capture_output=True, check=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return True
    return out.strip().lower() == BTRFS_SUPER_MAGIC


def ts(ns):
    sec, nsec = divmod(ns, 10**9)
    return "%d.%09d" % (sec, nsec)


def ftype(m):
    for test, name in (
        (stat.S_ISREG, "reg"),
        (stat.S_ISDIR, "dir"),
        (stat.S_ISLNK, "lnk"),
        (stat.S_ISCHR, "chr"),
        (stat.S_ISBLK, "blk"),
        (stat.S_ISFIFO, "fifo"),
        (stat.S_ISSOCK, "sock"),
    ):
        if test(m):
            return name
    raise ValueError("unknown file type %o" % m)


def sha256_file(path):
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NOATIME", 0))
    try:
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            h.update(b)
    finally:
        os.close(fd)
    return h.hexdigest()


def xattrs(path):
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError:
        return "-"
    items = []
    for n in names:
        nb = os.fsencode(n)
        if not all(0x21 <= c <= 0x7E and c not in b";=" for c in nb):
            raise ValueError("xattr name %r on %r not representable" % (nb, path))
        v = os.getxattr(path, n, follow_symlinks=False)
        items.append((nb, v))
    if not items:
        return "-"
    items.sort()
    return ";".join("%s=%s" % (n.decode(), v.hex()) for n, v in items)


def main():
    args = sys.argv[1:]
    links = bool(args) and args[0] == "--links"
    if links:
        args = args[1:]
    if len(args) != 1:
        sys.exit(__doc__)
    root = os.fsencode(args[0])
    root_st = os.lstat(root)
    btrfs = on_btrfs(root)
    rows = []
    skipped = []
    by_inode = {}

    def visit(rel, st):
        full = os.path.join(root, rel) if rel != b"." else root
        t = ftype(st.st_mode)
        size = str(st.st_size) if t in ("reg", "lnk") else "-"
        nlink = str(st.st_nlink) if t != "dir" else "-"
        digest = sha256_file(full) if t == "reg" else "-"
        target = os.readlink(full).hex() if t == "lnk" else "-"
        rdev = ("%d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev))) if t in ("chr", "blk") else "-"
        if t != "dir":
            by_inode.setdefault(st.st_ino, []).append(rel)
        rows.append((rel, "\t".join([
            rel.hex(), t, "%04o" % (st.st_mode & 0o7777), str(st.st_uid), str(st.st_gid),
            nlink, size, ts(st.st_mtime_ns), ts(st.st_atime_ns), digest, target, rdev,
            xattrs(full), repr(rel),
        ])))

    def walk(rel):
        full = os.path.join(root, rel) if rel != b"." else root
        with os.scandir(full) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            crel = e.name if rel == b"." else rel + b"/" + e.name
            st = os.lstat(os.path.join(root, crel))
            if stat.S_ISDIR(st.st_mode) and (
                st.st_dev != root_st.st_dev
                or (btrfs and st.st_ino in (BTRFS_EMPTY_SUBVOL_DIR_OBJECTID,
                                            BTRFS_FIRST_FREE_OBJECTID))
            ):
                skipped.append(crel)
                continue
            visit(crel, st)
            if stat.S_ISDIR(st.st_mode):
                walk(crel)

    visit(b".", root_st)
    walk(b".")
    rows.sort(key=lambda r: r[0])
    out = sys.stdout
    out.write("# manifest v1: path_hex type mode uid gid nlink size mtime atime sha256 "
              "target_hex rdev xattrs path_repr (TAB separated; see testdata/manifest.py)\n")
    for s in sorted(skipped):
        out.write("# skipped-subvol %s %r\n" % (s.hex(), s))
    if links:
        groups = sorted(sorted(g) for g in by_inode.values() if len(g) > 1)
        for g in groups:
            out.write("# hardlinks %s\n" % " ".join(p.hex() for p in g))
    for _, line in rows:
        out.write(line + "\n")


if __name__ == "__main__":
    main()
