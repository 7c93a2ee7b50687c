#!/usr/bin/env python3
"""Where rsend's CPU time goes, by kind of work, from `perf script` output.

Usage: perf_breakdown.py RUNS FREQ LABEL=FILE [LABEL=FILE ...]

FILE is `perf script -F comm,tid,ip,sym` of a `perf record -g --call-graph
dwarf -F FREQ` over RUNS runs of rsend (benches/incremental.sh PROFILE=1
makes them). Prints a markdown table, one column per LABEL, in ms of CPU
per run. Each sample is put in the first matching kind, looking at its
whole call chain, so the kinds hold whether or not dwarf unwinding reached
the caller (it often does not from kernel samples).
"""
import collections
import sys


def load(path):
    samples, cur = [], None
    with open(path, errors="replace") as f:
        for line in f:
            if line and not line[0].isspace():
                if cur is not None:
                    samples.append(cur)
                cur = []
            elif line.strip():
                parts = line.strip().split(None, 1)
                cur.append(parts[1] if len(parts) > 1 else "?")
    if cur is not None:
        samples.append(cur)
    return samples


KINDS = [
    ("pread: copying tree blocks and data out of the image's page cache",
     lambda s, own: "pread64" in s or "filemap_read" in s),
    ("fresh memory for block buffers: malloc, anonymous page faults, zeroing",
     lambda s, own: any(k in s for k in ("mprotect", "do_anonymous_page", "clear_page", "sysmalloc",
                                         "_int_malloc", "libc_malloc", "alloc_zeroed"))
     or ("exc_page_fault" in s and "filemap_map_pages" not in s and "do_fault" not in s)),
    ("freeing memory (mostly the block cache at exit)",
     lambda s, own: any(k in s for k in ("_int_free", "malloc_consolidate", "libc_free", "unlink_chunk",
                                         "exit_mmap", "unmap_page_range"))),
    ("crc32c and tree block validation",
     lambda s, own: "crc32c" in s or "block::validate" in s or "CsumType::verify" in s),
    ("memcpy (the Vec -> Arc copy of each block, items)",
     lambda s, own: ("memcpy" in s or "memmove" in s) and (own is None or "Arc<[T]" in s)),
    ("exec, dynamic linking, file page faults",
     lambda s, own: any(k in s for k in ("_dl_", "dl_main", "execve", "exec_binprm", "load_elf",
                                         "filemap_map_pages", "do_fault"))),
    ("thread hand-off (futex, scheduling)",
     lambda s, own: own is None and ("futex" in s or "schedule" in s)),
    ("tree compare and cursors (compare.rs, btrfs_disk::tree/block/key)",
     lambda s, own: own is not None and ("compare::" in own or own.startswith("btrfs_disk::")
                                         or "<btrfs_disk::" in own)),
    ("send logic: inodes, refs, paths, extents, encoding",
     lambda s, own: own is not None),
]


def own_frame(st):
    for fr in st:
        if fr.startswith(("rsend::", "btrfs_disk::", "btrfs_stream::", "<rsend::", "<btrfs_disk::",
                          "<btrfs_stream::")):
            return fr
    return None


def kind(st):
    s = " ".join(st)
    own = own_frame(st)
    for name, match in KINDS:
        if match(s, own):
            return name
    return "other (unresolved)"


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    runs, freq = int(sys.argv[1]), float(sys.argv[2])
    cols = [a.split("=", 1) for a in sys.argv[3:]]
    res = {label: collections.Counter(kind(st) for st in load(path)) for label, path in cols}
    scale = 1000.0 / freq / runs
    order = [k for k, _ in KINDS] + ["other (unresolved)"]
    print("| rsend CPU, ms per run | " + " | ".join(label for label, _ in cols) + " |")
    print("|:---|" + "---:|" * len(cols))
    for k in order:
        if any(res[label][k] for label, _ in cols):
            print(f"| {k} | " + " | ".join(f"{res[label][k] * scale:.1f}" for label, _ in cols) + " |")
    print("| **total** | " + " | ".join(f"**{sum(res[label].values()) * scale:.1f}**" for label, _ in cols) + " |")


if __name__ == "__main__":
    main()
