#!/usr/bin/env python3
"""Turn on fs-verity, by hand, for files of one read-only snapshot in an
unmounted btrfs image, writing the items the kernel writes
(fs/btrfs/verity.c): for inode INO

  (INO, VERITY_DESC_ITEM 36, 0)  struct btrfs_verity_descriptor_item:
                                 le64 size of the descriptor, le64 reserved[2],
                                 u8 encryption (0) -- 25 bytes
  (INO, VERITY_DESC_ITEM 36, 1)  the fsverity_descriptor, in items of at most
                                 2048 bytes at offsets 1, 2049, ...
  the inode's ro_flags gain BTRFS_INODE_RO_VERITY (bit 0 of the high word
  of btrfs_inode_item.flags), and the super blocks the compat_ro feature
  VERITY (1 << 2).

The files must be at most one Merkle block long, so their Merkle trees are
empty (fs-verity hashes the only block into the root hash): no
VERITY_MERKLE_ITEMs are needed.  The snapshot's fs tree must be one leaf
(its root), which a snapshot has to itself, so no other subvolume changes.
The image must have single metadata (one copy of the leaf).  The kernel
this was written for has no fs-verity (CONFIG_FS_VERITY is off), so what
a real kernel makes could not be compared; the layouts follow verity.c and
include/uapi/linux/fsverity.h.

Usage: make-verity.py IMAGE SNAPSHOT_ID SPEC... > verity.tsv
  SPEC is INO:PATH:ALG:LOG_BLOCKSIZE:SALT_HEX:SIG_HEX (ALG 1 = SHA-256,
  2 = SHA-512; SALT_HEX and SIG_HEX may be empty); PATH names the file in
  the output only; its data is read from the image by btrfs-progs.
Output: one line per file: PATH, INO, ALG, BLOCK_SIZE, SALT_HEX, SIG_HEX,
descriptor hex (tab-separated), what ENABLE_VERITY must carry.
"""
import hashlib
import re
import struct
import subprocess
import sys

HEADER = 101
ITEM = 25
INODE_ITEM, VERITY_DESC_ITEM = 1, 36
RO_VERITY = 1 << 32
COMPAT_RO_VERITY = 1 << 2
SUPERS = (0x10000, 0x4000000, 0x4000000000)
CHUNK = 2048


def crc32c(data, crc=0xFFFFFFFF):
    table = crc32c.table
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


crc32c.table = []
for n in range(256):
    c = n
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    crc32c.table.append(c)


def run(*args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def root_bytenr(image, tree_id):
    out = run("btrfs", "inspect-internal", "dump-tree", "-t", "1", image)
    m = re.search(r"key \(%d ROOT_ITEM \d+\) itemoff \d+ itemsize \d+\n[^\n]*bytenr (\d+)[^\n]*"
                  r"(?:\n[^\n]*){2}\n\s+level (\d+)" % tree_id, out)
    if not m:
        sys.exit("no ROOT_ITEM for tree %d" % tree_id)
    if int(m.group(2)) != 0:
        sys.exit("tree %d is not a single leaf (level %s)" % (tree_id, m.group(2)))
    return int(m.group(1))


def physical(image, logical):
    out = run("btrfs-map-logical", "-l", str(logical), image)
    offs = re.findall(r"physical (\d+)", out)
    if len(set(offs)) != 1:
        sys.exit("block %d has %d copies; make the image with -m single" % (logical, len(offs)))
    return int(offs[0])


def descriptor(alg, log_bs, salt, sig, data):
    digest = {1: hashlib.sha256, 2: hashlib.sha512}[alg]
    block = 1 << log_bs
    if len(data) > block:
        sys.exit("file of %d bytes is more than one %d-byte block" % (len(data), block))
    root = bytes(64)
    if data:
        h = digest()
        if salt:
            pad = h.block_size
            h.update(salt + bytes(-len(salt) % pad))
        h.update(data + bytes(block - len(data)))
        root = h.digest().ljust(64, b"\0")
    d = struct.pack("<BBBBIQ", 1, alg, log_bs, len(salt), len(sig), len(data))
    d += root + salt.ljust(32, b"\0") + bytes(144)
    assert len(d) == 256
    return d + sig


def main():
    image, tree_id, specs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    logical = root_bytenr(image, tree_id)
    off = physical(image, logical)
    with open(image, "r+b") as f:
        f.seek(SUPERS[0] + 148)
        (nodesize,) = struct.unpack("<I", f.read(4))
        f.seek(off)
        leaf = bytearray(f.read(nodesize))
        (found,) = struct.unpack_from("<Q", leaf, 48)
        if found != logical or leaf[100] != 0:
            sys.exit("block at %d is not the leaf %d" % (off, logical))
        nritems = struct.unpack_from("<I", leaf, 96)[0]
        items = []
        for i in range(nritems):
            oid, typ, koff, doff, size = struct.unpack_from("<QBQII", leaf, HEADER + ITEM * i)
            items.append([(oid, typ, koff), bytearray(leaf[HEADER + doff:HEADER + doff + size])])
        rows = []
        for spec in specs:
            ino_s, path, alg_s, log_s, salt_hex, sig_hex = spec.split(":")
            ino, alg, log_bs = int(ino_s), int(alg_s), int(log_s)
            salt, sig = bytes.fromhex(salt_hex), bytes.fromhex(sig_hex)
            inode = next((it for it in items if it[0] == (ino, INODE_ITEM, 0)), None)
            if inode is None:
                sys.exit("no inode %d in the leaf" % ino)
            size = struct.unpack_from("<Q", inode[1], 16)[0]
            data = read_file(image, tree_id, path, size)
            desc = descriptor(alg, log_bs, salt, sig, data)
            flags = struct.unpack_from("<Q", inode[1], 64)[0] | RO_VERITY
            struct.pack_into("<Q", inode[1], 64, flags)
            items.append([(ino, VERITY_DESC_ITEM, 0),
                          bytearray(struct.pack("<QQQB", len(desc), 0, 0, 0))])
            for k in range(0, len(desc), CHUNK):
                items.append([(ino, VERITY_DESC_ITEM, 1 + k), bytearray(desc[k:k + CHUNK])])
            rows.append("\t".join([path, str(ino), str(alg), str(1 << log_bs), salt.hex(),
                                   sig.hex(), desc.hex()]))
        items.sort(key=lambda it: it[0])
        end = nodesize - HEADER
        body = bytearray(nodesize - HEADER)
        for i, (key, data) in enumerate(items):
            end -= len(data)
            if end < ITEM * len(items):
                sys.exit("the leaf has no room for the verity items")
            struct.pack_into("<QBQII", body, ITEM * i, key[0], key[1], key[2], end, len(data))
            body[end:end + len(data)] = data
        leaf[HEADER:] = body
        struct.pack_into("<I", leaf, 96, len(items))
        leaf[0:32] = struct.pack("<I", crc32c(leaf[32:])) + bytes(28)
        f.seek(off)
        f.write(leaf)
        f.seek(0, 2)
        image_size = f.tell()
        for at in SUPERS:
            if at + 4096 > image_size:
                continue
            f.seek(at)
            sb = bytearray(f.read(4096))
            if sb[64:72] != b"_BHRfS_M":
                continue
            ro = struct.unpack_from("<Q", sb, 180)[0] | COMPAT_RO_VERITY
            struct.pack_into("<Q", sb, 180, ro)
            sb[0:32] = struct.pack("<I", crc32c(sb[32:])) + bytes(28)
            f.seek(at)
            f.write(sb)
    print("# path\tino\talgorithm\tblock_size\tsalt\tsignature\tdescriptor")
    print("\n".join(rows))


def read_file(image, tree_id, path, size):
    """The file's bytes, from the image without a mount (btrfs restore)."""
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(["btrfs", "restore", "-r", str(tree_id), "--path-regex",
                        "^/(|%s)$" % re.escape(path), image, d],
                       check=True, capture_output=True)
        p = os.path.join(d, path)
        with open(p, "rb") as f:
            data = f.read()
    if len(data) != size:
        sys.exit("%s: restored %d bytes, the inode has %d" % (path, len(data), size))
    return data


if __name__ == "__main__":
    main()
