"""The small-file tree of the incremental benchmarks, and its change.

    python3 smalltree.py make ROOT N     N files in ROOT/dNNNN/fNNNN
    python3 smalltree.py change ROOT N [K]   the change between s0 and s1

The tree: 1000 files per directory, 1-3000 bytes of pseudo-random data
each (about two thirds inline on btrfs, the rest in data extents). The
change: 100 files spread over the tree rewritten, 5 deleted, 5 created,
directories d0003 and d0005 moved into other directories. Both are
deterministic; the scripts key their cached images on this file's hash.
"""
import os
import random
import sys

PER = 1000


def make(root, n):
    blob = random.Random(1).randbytes(1 << 16)
    for d in range((n + PER - 1) // PER):
        rnd = random.Random(d)
        os.mkdir(f"{root}/d{d:04d}")
        for f in range(min(PER, n - d * PER)):
            ln = rnd.randint(1, 3000)
            off = rnd.randrange(0, len(blob) - ln)
            fd = os.open(f"{root}/d{d:04d}/f{f:04d}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, blob[off:off + ln])
            os.close(fd)


def change(root, n, k_rewritten=100):
    ndirs = (n + PER - 1) // PER
    rnd = random.Random(42)

    def path(i):
        d, f = divmod(i, PER)
        return f"{root}/d{d:04d}/f{f:04d}"

    for k in range(k_rewritten):  # spread evenly over the tree
        with open(path(k * n // k_rewritten + 7), "wb") as fh:
            fh.write(rnd.randbytes(rnd.randint(1, 3000)))
    for k in range(5):  # 5 deleted, 5 created
        i = k * n // 5 + 500
        os.unlink(path(i))
        with open(os.path.dirname(path(i)) + f"/new{k}", "wb") as fh:
            fh.write(rnd.randbytes(100 + 10 * k))
    os.rename(f"{root}/d0003", f"{root}/d{ndirs - 1:04d}/moved-d0003")
    os.rename(f"{root}/d0005", f"{root}/d0001/moved-d0005")


if __name__ == "__main__":
    {"make": make, "change": change}[sys.argv[1]](sys.argv[2], *map(int, sys.argv[3:]))
