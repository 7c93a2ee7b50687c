#!/usr/bin/env python3
"""The changes of each night of testdata/make-catalog-chain.sh's chain.

Usage: catalog-chain.py NIGHT SRC SNAPS

  NIGHT  1 (the full tree, written uncompressed), 1z (the part of night 1 written while the
         filesystem is mounted compress=zstd: docs/), or 2..10 (the changes of that night)
  SRC    the source subvolume (writable)
  SNAPS  the directory holding the read-only snapshots n01..n10 taken so far (night 10
         clones from n05)

Everything is deterministic: each night draws from random.Random(NIGHT), and what it picks
among existing files it picks from a sorted listing.  Contents are text (lines with a number
and words from a small list), so the stream files compress well with zstd and the filesystem's
compression (nights 1z, 2, 3, 5, 8, 9) gives real compressed extents.

Night 1: a few directories deep, about 230 files of mixed sizes (0 B .. 300 KiB), large.bin
(4 MiB), sparse.img (holes at the start, in the middle and at the end), hard links (in one
directory and across directories, a group of three), symlinks (relative, dangling, to a
directory, a 300-byte target), a fifo, a character and a block device, a socket, xattrs
(user.*, one of 4 KiB, on a directory too), odd names (space, newline, tab, backslash,
non-UTF-8 bytes, a leading dash, glob characters, a dot file), reflinks (whole file and a
range of large.bin), setuid/setgid/sticky and other modes, owners 1000 and 65534, times set
with nanoseconds.

Every later night: large.bin changed in small pieces (four pwrites of 0.5-8 KiB at random
offsets, one append; nights 3, 6 and 9 also shrink it by 100-400 KiB and extend it again,
leaving a hole), sparse.img punched (fallocate -p) and extended, modes, owners and times of a
few files changed, an xattr set and one removed, three new files, two removed; and the
changes of that night named in NIGHTS below (renames of files and directories, a file deleted
and recreated, hard links added and removed, reflinks whole and of ranges).
"""
import errno
import fcntl
import os
import random
import socket
import stat
import struct
import subprocess
import sys

WORDS = (b"alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
         b"november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee "
         b"zulu btrfs send receive catalog night stream").split()
FICLONERANGE = 0x4020940D
KIB = 1024
MIB = 1024 * KIB


def text(rng, size, tag):
    """size bytes of lines 'TAG NNNNNNN word word ...'."""
    out = bytearray()
    n = 0
    while len(out) < size:
        words = b" ".join(rng.choice(WORDS) for _ in range(rng.randrange(3, 12)))
        out += b"%s %07d %s\n" % (tag, n, words)
        n += 1
    return bytes(out[:size])


def numbered(size, tag):
    """size bytes of lines that depend only on the line number (compress very well)."""
    out = bytearray()
    n = 0
    while len(out) < size:
        out += b"%s line %08d %s %s\n" % (tag, n, WORDS[n * 7 % len(WORDS)], WORDS[n % 5])
        n += 1
    return bytes(out[:size])


def p(src, rel):
    return os.path.join(src, rel if isinstance(rel, bytes) else os.fsencode(rel))


def write(src, rel, data, mode=None):
    path = p(src, rel)
    with open(path, "wb") as f:
        f.write(data)
    if mode is not None:
        os.chmod(path, mode)


def pwrite(src, rel, off, data):
    fd = os.open(p(src, rel), os.O_WRONLY)
    try:
        os.pwrite(fd, data, off)
    finally:
        os.close(fd)


def append(src, rel, data):
    with open(p(src, rel), "ab") as f:
        f.write(data)


def truncate(src, rel, size):
    os.truncate(p(src, rel), size)


def reflink(src_path, dst_path, src_off=None, length=None, dst_off=None):
    """The whole file (cp --reflink=always) or a range (FICLONERANGE; offsets 4 KiB aligned)."""
    if src_off is None:
        subprocess.run(["cp", "--reflink=always", src_path, dst_path], check=True)
        return
    sfd = os.open(src_path, os.O_RDONLY)
    dfd = os.open(dst_path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        fcntl.ioctl(dfd, FICLONERANGE, struct.pack("qQQQ", sfd, src_off, length, dst_off))
    finally:
        os.close(sfd)
        os.close(dfd)


def punch(src, rel, off, length):
    subprocess.run(["fallocate", "-p", "-o", str(off), "-l", str(length), p(src, rel)], check=True)


def data_segments(path):
    """The (start, end) of each run of data (SEEK_DATA/SEEK_HOLE)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        out, pos = [], 0
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as e:
                if e.errno == errno.ENXIO:
                    break
                raise
            end = os.lseek(fd, start, os.SEEK_HOLE)
            out.append((start, end))
            pos = end
        return out
    finally:
        os.close(fd)


def times(src, rel, sec, nsec, asec=None):
    """mtime sec.nsec, atime asec (default: a day before) .nsec/3; the link itself."""
    a = (sec - 86400 if asec is None else asec) * 10**9 + nsec // 3
    os.utime(p(src, rel), ns=(a, sec * 10**9 + nsec), follow_symlinks=False)


def setx(src, rel, name, value):
    os.setxattr(p(src, rel), name, value, follow_symlinks=False)


def listing(src, want_dirs=False):
    """Sorted relative paths of regular files (or directories) below src, skipping odd/ and misc/."""
    out = []
    for root, dirs, files in os.walk(src):
        rel = os.path.relpath(root, src)
        if rel.startswith(b"odd") or rel.startswith(b"misc"):
            continue
        for n in (dirs if want_dirs else files):
            r = n if rel == b"." else rel + b"/" + n
            if want_dirs or stat.S_ISREG(os.lstat(p(src, r)).st_mode):
                out.append(r)
    return sorted(out)


def night1(src, rng):
    for d in ("src/a/b/c/d", "data", "misc/sticky", "odd", "many"):
        os.makedirs(p(src, d), exist_ok=True)
    # Files of mixed sizes in a tree four levels deep.
    for depth, d in enumerate(("src/a", "src/a/b", "src/a/b/c", "src/a/b/c/d")):
        for i in range(20):
            size = rng.choice((0, 17, 600, 2000, 4096, 6000, 9000)) if i % 4 else rng.randrange(0, 3000)
            write(src, "%s/f%02d" % (d, i), text(rng, size, b"n01-%d-%02d" % (depth, i)))
    for i in range(60):
        write(src, "many/m%03d" % i, text(rng, rng.randrange(0, 200), b"m%03d" % i))
    for size in (0, 1, 4095, 4096, 4097, 65536, 131073, 300000):
        write(src, "data/size-%d" % size, numbered(size, b"size-%d" % size))
    write(src, "large.bin", numbered(4 * MIB, b"large"))
    # sparse.img: holes at the start, in the middle and at the end.
    with open(p(src, "sparse.img"), "wb") as f:
        f.truncate(MIB)
        f.seek(256 * KIB)
        f.write(text(rng, 4 * KIB, b"sparse-a"))
        f.seek(512 * KIB)
        f.write(text(rng, 8 * KIB, b"sparse-b"))
        f.seek(700 * KIB)
        f.write(text(rng, 3000, b"sparse-c"))
    # Hard links: in one directory, across directories, a group of three.
    write(src, "data/h1", text(rng, 5000, b"h1"))
    os.link(p(src, "data/h1"), p(src, "data/h1-link"))
    os.link(p(src, "data/h1"), p(src, "src/a/h1-far"))
    write(src, "data/g2a", text(rng, 700, b"g2"))
    os.link(p(src, "data/g2a"), p(src, "src/a/b/g2b"))
    write(src, "data/recreate.txt", text(rng, 3000, b"recreate-n01"))
    write(src, "data/only-until-5.dat", text(rng, 100 * KIB, b"only-until-5"))
    # Reflinks: a whole file and a range of large.bin inside a file of its own.
    reflink(p(src, "data/size-300000"), p(src, "data/clone-of-300k"))
    write(src, "data/part-clone", text(rng, 200 * KIB, b"part"))
    reflink(p(src, "large.bin"), p(src, "data/part-clone"), MIB, 64 * KIB, 8 * KIB)
    # Modes and owners.
    for name, mode in (("mode-4755", 0o4755), ("mode-0600", 0o600), ("mode-2750", 0o2750),
                       ("mode-0000", 0o000), ("mode-0444", 0o444)):
        write(src, "data/" + name, text(rng, 300, name.encode()), mode)
    write(src, "data/owned-1000", b"owned by 1000\n")
    os.chown(p(src, "data/owned-1000"), 1000, 1000)
    write(src, "data/owned-65534", b"owned by nobody\n")
    os.chown(p(src, "data/owned-65534"), 65534, 65534)
    os.chmod(p(src, "misc/sticky"), 0o1777)
    os.chmod(p(src, "src/a/b/c"), 0o750)
    # xattrs: small, empty, 4 KiB, on a directory.
    write(src, "data/xattr-big", text(rng, 1000, b"xb"))
    setx(src, "data/xattr-big", "user.big", text(rng, 4096, b"xv"))
    setx(src, "data/xattr-big", "user.small", b"1")
    setx(src, "data/xattr-big", "user.empty", b"")
    setx(src, "src/a/b", "user.dir", b"a directory's xattr")
    setx(src, "data/h1", "user.linked", b"on an inode with three links")
    # Special files.
    os.mkfifo(p(src, "misc/fifo"))
    os.mknod(p(src, "misc/chr"), 0o620 | stat.S_IFCHR, os.makedev(1, 3))
    os.mknod(p(src, "misc/blk"), 0o660 | stat.S_IFBLK, os.makedev(7, 200))
    s = socket.socket(socket.AF_UNIX)
    s.bind(p(src, "misc/sock"))
    s.close()
    # Symlinks.
    os.symlink("../large.bin", p(src, "misc/sym-large"))
    os.symlink("nowhere/at/all", p(src, "misc/sym-dangling"))
    os.symlink("../data", p(src, "misc/sym-dir"))
    os.symlink("l" * 299 + "/", p(src, "misc/sym-long"))
    # Odd names.
    for name in (b"with space", b"new\nline", b"bad\xff\xfe", b"tab\tname", b"back\\slash",
                 b".hidden", "\u00fcn\u00efc\u00f6d\u00e9".encode(), b"-dash", b"star*q?[x]"):
        write(src, b"odd/" + name, b"odd name " + name + b"\n")
    os.mkdir(p(src, b"odd/dir \xe9"))
    write(src, b"odd/dir \xe9/inner", b"inside a directory with a latin-1 name\n")
    os.symlink(b"../odd/new\nline", p(src, b"odd/sym \xff"))
    # Times with nanoseconds, on files, a symlink and a directory.
    times(src, "data/size-4096", 1500000000, 123456789)
    times(src, "data/h1", 1400000000, 1)
    times(src, "misc/sym-dangling", 1300000000, 999999999)
    times(src, "many/m001", 946684800, 500000000, asec=946684800)
    times(src, b"odd/bad\xff\xfe", 1234567890, 42)


def night1z(src, rng):
    """docs/: written while the filesystem is mounted compress=zstd."""
    os.mkdir(p(src, "docs"))
    for i in range(40):
        size = (150000, 70000, 140000)[i] if i < 3 else rng.choice((100, 1000, 3000, 8000, 20000))
        write(src, "docs/doc-%02d.txt" % i, text(rng, size, b"doc-%02d" % i))
    os.link(p(src, "data/g2a"), p(src, "docs/g2c"))


def every_night(n, src, rng):
    tag = b"n%02d" % n
    # large.bin in small pieces.
    size = os.stat(p(src, "large.bin")).st_size
    for k in range(4):
        length = rng.randrange(512, 8 * KIB)
        pwrite(src, "large.bin", rng.randrange(0, size - length), text(rng, length, tag + b"-piece%d" % k))
    append(src, "large.bin", text(rng, rng.randrange(1000, 12000), tag + b"-append"))
    if n % 3 == 0:
        size = os.stat(p(src, "large.bin")).st_size
        shrunk = size - rng.randrange(100 * KIB, 400 * KIB)
        truncate(src, "large.bin", shrunk)
        truncate(src, "large.bin", shrunk + rng.randrange(50 * KIB, 200 * KIB))
        pwrite(src, "large.bin", shrunk + 20000, text(rng, 3000, tag + b"-reextend"))
    # sparse.img: a hole punched where there is data, a write into a hole, extended.
    size = os.stat(p(src, "sparse.img")).st_size
    segments = data_segments(p(src, "sparse.img"))
    start, end = rng.choice([s for s in segments if s[1] - s[0] >= 4 * KIB])
    punch(src, "sparse.img", start + (rng.randrange(0, end - start - 4 * KIB + 1) & ~4095), 4 * KIB)
    pwrite(src, "sparse.img", 128 * KIB * (n % 4) + 64 * KIB, text(rng, 2000, tag + b"-sparse"))
    if n % 2 == 0:
        truncate(src, "sparse.img", size + 64 * KIB)
    elif n % 4 == 1:
        pwrite(src, "sparse.img", size + 32 * KIB, text(rng, 1500, tag + b"-beyond"))
    # Modes, owners and times of a few files.
    files = listing(src)
    for i, rel in enumerate(rng.sample(files, 3)):
        os.chmod(p(src, rel), (0o640, 0o755, 0o4711)[i])
        times(src, rel, 1600000000 + n * 1000 + i, n * 1111111)
    rel = rng.choice(files)
    os.chown(p(src, rel), 1000 + n, 2000 + n)
    dirs = listing(src, want_dirs=True)
    times(src, rng.choice(dirs), 1700000000 + n, 777)
    # xattrs: one set, one removed.
    setx(src, rng.choice(files), "user.night%02d" % n, text(rng, rng.randrange(0, 200), tag))
    for rel in files:
        names = os.listxattr(p(src, rel), follow_symlinks=False)
        if names and rng.random() < 0.5:
            os.removexattr(p(src, rel), names[0], follow_symlinks=False)
            break
    # Three new files, two removed.
    for k in range(3):
        d = rng.choice(dirs)
        write(src, b"%s/new-%02d-%d" % (d, n, k), text(rng, rng.randrange(0, 20000), tag + b"-new"))
    many = sorted(os.listdir(p(src, b"many")))
    for name in rng.sample(many, 2):
        os.unlink(p(src, b"many/" + name))


def night2(src, rng):
    os.link(p(src, "data/h1"), p(src, "data/h1-link2"))
    os.rename(p(src, "src/a/f03"), p(src, "src/a/b/renamed-2"))
    docs = sorted(os.listdir(p(src, b"docs")))
    biggest = max(docs, key=lambda d: (os.stat(p(src, b"docs/" + d)).st_size, d))
    reflink(p(src, b"docs/" + biggest), p(src, "data/reflink-2"))
    write(src, "data/compressible-2", text(rng, 96 * KIB, b"n02-z"))


def night3(src, rng):
    os.rename(p(src, "src/a/b"), p(src, "src/moved-b"))
    reflink(p(src, "large.bin"), p(src, "data/part-clone"), 2 * MIB, 128 * KIB, 0)
    os.unlink(p(src, "data/recreate.txt"))
    write(src, "data/recreate.txt", text(rng, 4000, b"recreate-n03"))
    write(src, "data/compressible-3", text(rng, 80 * KIB, b"n03-z"))


def night4(src, rng):
    os.unlink(p(src, "data/h1-link"))
    os.link(p(src, "src/a/h1-far"), p(src, "misc/h1-third"))
    os.rename(p(src, b"odd/with space"), p(src, b"data/with space moved"))
    os.mkdir(p(src, "data/new-dir-4"))
    write(src, "data/new-dir-4/file", text(rng, 3000, b"n04"))


def night5(src, rng):
    os.unlink(p(src, "data/recreate.txt"))
    os.rename(p(src, "src/moved-b"), p(src, "data/b2"))
    # A range of a file made on night 2 into large.bin.
    reflink(p(src, "data/reflink-2"), p(src, "large.bin"), 0, 8 * KIB, 3 * MIB)
    write(src, "data/compressible-5", text(rng, 100 * KIB, b"n05-z"))


def night6(src, rng):
    write(src, "data/recreate.txt", text(rng, 2500, b"recreate-n06"))
    os.unlink(p(src, "data/only-until-5.dat"))
    os.rename(p(src, b"data/with space moved"), p(src, b"odd/with space"))
    os.rename(p(src, b"odd/.hidden"), p(src, b"odd/.hidden2"))


def night7(src, rng):
    os.link(p(src, "large.bin"), p(src, "data/large-hl"))
    os.rename(p(src, "data/b2"), p(src, "src/a/b"))
    os.chown(p(src, "misc/sym-large"), 1007, 1007, follow_symlinks=False)
    write(src, "data/made-7", text(rng, 40 * KIB, b"n07"))


def night8(src, rng):
    os.unlink(p(src, "src/a/h1-far"))
    os.mkdir(p(src, "newdir-8"))
    write(src, "newdir-8/x", text(rng, 6000, b"n08-x"))
    os.link(p(src, "newdir-8/x"), p(src, "newdir-8/x-link"))
    os.link(p(src, "docs/doc-07.txt"), p(src, "newdir-8/doc-07-link"))
    reflink(p(src, "data/made-7"), p(src, "newdir-8/made-7-clone"))
    write(src, "data/compressible-8", text(rng, 90 * KIB, b"n08-z"))


def night9(src, rng):
    os.rename(p(src, b"odd/new\nline"), p(src, b"odd/new\nline\nrenamed"))
    # A file replaced by a directory of the same name.
    os.unlink(p(src, "data/size-1"))
    os.mkdir(p(src, "data/size-1"))
    write(src, "data/size-1/inside", b"a directory where a file was\n")
    subprocess.run(["rm", "-rf", "--", p(src, "newdir-8")], check=True)
    write(src, "data/compressible-9", text(rng, 70 * KIB, b"n09-z"))


def night10(src, rng, snaps):
    # From a snapshot the source no longer has the file of (sent with -c n05).
    reflink(os.path.join(snaps, b"n05", b"data", b"only-until-5.dat"), p(src, "data/back-from-n05"))
    reflink(os.path.join(snaps, b"n05", b"data", b"only-until-5.dat"), p(src, "data/part-clone"),
            16 * KIB, 32 * KIB, 64 * KIB)
    os.unlink(p(src, "data/large-hl"))


NIGHTS = {2: night2, 3: night3, 4: night4, 5: night5, 6: night6, 7: night7, 8: night8, 9: night9}


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    night, src, snaps = sys.argv[1], os.fsencode(sys.argv[2]), os.fsencode(sys.argv[3])
    os.umask(0o022)
    if night == "1":
        night1(src, random.Random(1))
    elif night == "1z":
        night1z(src, random.Random(101))
    else:
        n = int(night)
        if not 2 <= n <= 10:
            sys.exit("night %s: not 1, 1z or 2..10" % night)
        rng = random.Random(n)
        every_night(n, src, rng)
        if n == 10:
            night10(src, rng, snaps)
        else:
            NIGHTS[n](src, rng)


if __name__ == "__main__":
    try:
        main()
    except OSError as e:
        if e.errno == errno.EPERM:
            sys.exit("catalog-chain.py: %s (needs root)" % e)
        raise
