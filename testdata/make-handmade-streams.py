#!/usr/bin/env python3
"""Generate the hand-made btrfs send streams in testdata/handmade/.

Usage:  python3 testdata/make-handmade-streams.py [--no-progs]

Standard library only; the output is byte-for-byte deterministic (no
time-, locale- or library-version-dependent input: the CRC-32C, the
pseudo-random generator and the zlib/deflate encoder are implemented here).

What is written (see testdata/handmade/README.md for the full description):

  all-v1.stream, all-v2.stream, all-v3.stream, empty-subvol-v1.stream
      valid streams.  Their expected `btrfs receive --dump` output
      (*.dump with TZ=UTC, *.dump.kolkata with TZ=Asia/Kolkata, exit code
      in *.dump.rc) is captured from the real btrfs-progs when `btrfs` is on
      PATH.  The all-* files hold three concatenated streams; progs --dump
      stops after the FIRST stream's END (it reads one stream only), so
      *.dump covers stream 1 only, and *.dump.all-streams[.kolkata] is the
      concatenation of the progs dumps of each stream fed separately.

  all-v3.dump / all-v3.dump.kolkata
      btrfs-progs release builds refuse stream version 3 ("stream version 3
      not supported"), so these are derived by hand from the rules of
      send-stream.md section 6.3: the v3 stream is exactly the v2 stream
      plus one ENABLE_VERITY command (and version 3 in the three stream
      headers; the version is never printed).  So all-v3.dump is the progs
      output for all-v2.stream with one line inserted at the position of the
      ENABLE_VERITY command (END prints nothing, every other command prints
      exactly one line):
          "%-16s" % "enable_verity", escaped path, spaces up to 32 columns of
          escaped path (at least one), then
          "algorithm=N block_size=N salt_len=N sig_len=N".
      The path is "<current subvol prefix>/<PATH>" as for every other
      command.  As a cross-check (not a source of the expected file), the
      script also feeds progs a version-2 copy of the v3 stream *with* the
      ENABLE_VERITY command (release progs parse command 26 regardless of
      the header version) and asserts that the result is identical.  The
      same is done for all-v3.dump.all-streams[.kolkata].

  broken-*.stream, broken.tsv
      malformed streams, one fault each, and a table describing where the
      fault is.  With progs available, the progs behaviour is recorded in
      broken-*.stream.progs.{out,err,rc} and in the progs_rc column.

With --no-progs (or without a `btrfs` binary) only the streams and the
table are (re)written; existing progs captures are left untouched and
progs_rc is taken from existing *.progs.rc files ("NA" if missing).
"""

import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "handmade")

# ---------------------------------------------------------------------------
# CRC-32C (Castagnoli), table driven, reflected polynomial 0x82F63B78.

CRC32C_POLY = 0x82F63B78


def _make_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ CRC32C_POLY if c & 1 else c >> 1
        table.append(c)
    return table


CRC32C_TABLE = _make_table()


def crc32c_raw(crc, data):
    """Raw reflected CRC register update: no initial or final inversion."""
    t = CRC32C_TABLE
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc


def crc32c_standard(data):
    """Standard CRC-32C (init 0xFFFFFFFF, xorout 0xFFFFFFFF)."""
    return crc32c_raw(0xFFFFFFFF, data) ^ 0xFFFFFFFF


def crc32c_btrfs(data):
    """btrfs send variant: seed 0, no final xor."""
    return crc32c_raw(0, data)


def _crc_selfcheck():
    # Standard check value validates the table.
    assert crc32c_standard(b"123456789") == 0xE3069283, "CRC-32C table broken"
    # btrfs variant via the "append" identity of send-stream.md 1.2:
    # append(crc, d) = ~raw(~crc, d); btrfs(d) = ~append(0xFFFFFFFF, d).
    def append(crc, d):
        return crc32c_raw(crc ^ 0xFFFFFFFF, d) ^ 0xFFFFFFFF
    for d in (b"", b"123456789", bytes(range(256)) * 3):
        assert crc32c_btrfs(d) == append(0xFFFFFFFF, d) ^ 0xFFFFFFFF
    assert crc32c_btrfs(b"") == 0
    # crc of a crc-zeroed command header + payload is chainable (ENCODED_WRITE)
    a, b = b"btrfs", b"-stream"
    assert crc32c_raw(crc32c_btrfs(a), b) == crc32c_btrfs(a + b)


_crc_selfcheck()

# ---------------------------------------------------------------------------
# Deterministic pseudo-random bytes: xorshift64* (no dependency on the
# random module's algorithm).


class XorShift64Star:
    def __init__(self, seed):
        self.s = (seed or 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF

    def next64(self):
        x = self.s
        x ^= x >> 12
        x ^= (x << 25) & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 27
        self.s = x
        return (x * 0x2545F4914F6CDD1D) & 0xFFFFFFFFFFFFFFFF

    def bytes(self, n):
        out = bytearray()
        while len(out) < n:
            out += struct.pack("<Q", self.next64())
        return bytes(out[:n])


def prand(seed, n):
    return XorShift64Star(seed).bytes(n)


# ---------------------------------------------------------------------------
# Minimal zlib (RFC 1950) / deflate (RFC 1951) encoder: one final block with
# the fixed Huffman code, greedy LZ77.  Used instead of zlib.compress so that
# the compressed bytes do not depend on the zlib build (zlib vs zlib-ng).

_LEN_BASE = [3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43,
             51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258]
_LEN_EXTRA = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4,
              4, 4, 5, 5, 5, 5, 0]
_DIST_BASE = [1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257,
              385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289,
              16385, 24577]
_DIST_EXTRA = [0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9,
               10, 10, 11, 11, 12, 12, 13, 13]


class _BitWriter:
    def __init__(self):
        self.out = bytearray()
        self.acc = 0
        self.n = 0

    def bits(self, value, count):  # LSB first
        self.acc |= value << self.n
        self.n += count
        while self.n >= 8:
            self.out.append(self.acc & 0xFF)
            self.acc >>= 8
            self.n -= 8

    def huff(self, code, length):  # Huffman codes are sent MSB first
        rev = 0
        for i in range(length):
            rev |= ((code >> i) & 1) << (length - 1 - i)
        self.bits(rev, length)

    def flush(self):
        if self.n:
            self.out.append(self.acc & 0xFF)
        self.acc = self.n = 0
        return bytes(self.out)


def _fixed_litlen(w, sym):
    if sym < 144:
        w.huff(0x30 + sym, 8)
    elif sym < 256:
        w.huff(0x190 + sym - 144, 9)
    elif sym < 280:
        w.huff(sym - 256, 7)
    else:
        w.huff(0xC0 + sym - 280, 8)


def _adler32(data):
    a, b = 1, 0
    for x in data:
        a = (a + x) % 65521
        b = (b + a) % 65521
    return (b << 16) | a


def zlib_fixed(data):
    w = _BitWriter()
    w.bits(1, 1)  # BFINAL
    w.bits(1, 2)  # BTYPE = 01 fixed Huffman
    heads = {}
    i, n = 0, len(data)
    while i < n:
        best_len = best_dist = 0
        if i + 3 <= n:
            key = data[i:i + 3]
            for j in reversed(heads.get(key, [])[-16:]):
                dist = i - j
                if dist > 32768:
                    break
                ln = 0
                while ln < 258 and i + ln < n and data[j + ln] == data[i + ln]:
                    ln += 1
                if ln > best_len:
                    best_len, best_dist = ln, dist
        if best_len >= 3:
            li = max(k for k in range(29) if _LEN_BASE[k] <= best_len)
            _fixed_litlen(w, 257 + li)
            w.bits(best_len - _LEN_BASE[li], _LEN_EXTRA[li])
            di = max(k for k in range(30) if _DIST_BASE[k] <= best_dist)
            w.huff(di, 5)
            w.bits(best_dist - _DIST_BASE[di], _DIST_EXTRA[di])
            step = best_len
        else:
            _fixed_litlen(w, data[i])
            step = 1
        for k in range(i, min(i + step, n - 2)):
            heads.setdefault(data[k:k + 3], []).append(k)
        i += step
    _fixed_litlen(w, 256)  # end of block
    return b"\x78\x01" + w.flush() + struct.pack(">I", _adler32(data))


# ---------------------------------------------------------------------------
# Send stream constants (send-stream.md 1.4 / 1.5)

MAGIC = b"btrfs-stream\0"

C = dict(SUBVOL=1, SNAPSHOT=2, MKFILE=3, MKDIR=4, MKNOD=5, MKFIFO=6, MKSOCK=7,
         SYMLINK=8, RENAME=9, LINK=10, UNLINK=11, RMDIR=12, SET_XATTR=13,
         REMOVE_XATTR=14, WRITE=15, CLONE=16, TRUNCATE=17, CHMOD=18, CHOWN=19,
         UTIMES=20, END=21, UPDATE_EXTENT=22, FALLOCATE=23, FILEATTR=24,
         ENCODED_WRITE=25, ENABLE_VERITY=26)

A = dict(UUID=1, CTRANSID=2, INO=3, SIZE=4, MODE=5, UID=6, GID=7, RDEV=8,
         CTIME=9, MTIME=10, ATIME=11, OTIME=12, XATTR_NAME=13, XATTR_DATA=14,
         PATH=15, PATH_TO=16, PATH_LINK=17, FILE_OFFSET=18, DATA=19,
         CLONE_UUID=20, CLONE_CTRANSID=21, CLONE_PATH=22, CLONE_OFFSET=23,
         CLONE_LEN=24, FALLOCATE_MODE=25, FILEATTR=26, UNENCODED_FILE_LEN=27,
         UNENCODED_LEN=28, UNENCODED_OFFSET=29, COMPRESSION=30, ENCRYPTION=31,
         VERITY_ALGORITHM=32, VERITY_BLOCK_SIZE=33, VERITY_SALT_DATA=34,
         VERITY_SIG_DATA=35)


def u8(v):
    return struct.pack("<B", v)


def u32(v):
    return struct.pack("<I", v & 0xFFFFFFFF)


def u64(v):
    return struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF)  # negative -> two's compl.


def ts(sec, nsec=0):
    return u64(sec) + u32(nsec)


def b(s):
    return s.encode("utf-8") if isinstance(s, str) else bytes(s)


def stream_header(version, magic=MAGIC):
    return magic + u32(version)


def tlv(attr, value, version):
    value = b(value)
    if attr == A["DATA"] and version >= 2:
        return struct.pack("<H", attr) + value  # runs to end of command
    assert len(value) <= 0xFFFF, (attr, len(value))
    return struct.pack("<HH", attr, len(value)) + value


def raw_tlv(attr, declared_len, value):
    """TLV with an arbitrary (possibly wrong) length field."""
    return struct.pack("<HH", attr, declared_len) + value


def command(cmd, payload, length=None, crc=None):
    """Serialize one command; payload is the raw TLV bytes.

    length / crc override the header fields (for broken streams)."""
    ln = len(payload) if length is None else length
    hdr0 = struct.pack("<IHI", ln, cmd, 0)
    if crc is None:
        crc = crc32c_btrfs(hdr0 + payload)
    return struct.pack("<IHI", ln, cmd, crc) + payload


class Cmd:
    def __init__(self, name, *attrs):
        self.name = name
        self.cmd = C[name]
        self.attrs = list(attrs)  # (attr name, value bytes)

    def payload(self, version):
        return b"".join(tlv(A[a], v, version) for a, v in self.attrs)

    def encode(self, version):
        return command(self.cmd, self.payload(version))


def build(streams):
    """streams: list of (version, [Cmd]); returns bytes and unit table."""
    out = bytearray()
    units = []  # (offset, kind, name)
    for version, cmds in streams:
        units.append((len(out), "header", "header"))
        out += stream_header(version)
        for c in cmds:
            units.append((len(out), "cmd", c.name))
            enc = c.encode(version)
            if version == 1:  # BTRFS_SEND_BUF_SIZE_V1 incl. header
                assert len(enc) <= 65536, (c.name, len(enc))
            out += enc
    return bytes(out), units


# ---------------------------------------------------------------------------
# Content of the all-vN streams


U1 = bytes.fromhex("4f3c2a1be0d94c7b8a6e5d4c3b2a1908")
U2 = bytes.fromhex("00112233445566778899aabbccddeeff")
U3 = bytes.fromhex("fedcba98765432100123456789abcdef")
U4 = bytes.fromhex("a5a5a5a55a5a5a5a0f0f0f0ff0f0f0f0")

# Tricky names (bytes): space, newline, tab, backslash, DEL, 0xff, UTF-8 e-acute
N_DIR = b"dir with space"
N_NL = N_DIR + b"/new\nline"
N_TAB = b"tab\there"
N_BSL = b"back\\slash"
N_DEL = b"hard\x7flink"
N_FF = b"sym\xff"
N_CAFE = "café".encode("utf-8")  # c3 a9
N_CHR = b"char dev"
N_BLK = b"blk"
N_FIFO = b"fifo"
N_SOCK = b"sock"

# timestamps (seconds, nanoseconds), far apart; all valid for localtime
T_ZERO = (0, 0)
T_MINUS1 = (-1, 999999999)          # 1969-12-31T23:59:59Z, encoded as 2^64-1
T_1944 = (-820540800, 1)            # Kolkata was +0630 then
T_1960 = (-315619200, 500)
T_2001 = (1000000000, 123456789)
T_2038A = (2147483647, 0)           # last signed 32-bit second
T_2038B = (2147483648, 1)           # first second past it
T_2100 = (4102444800, 42)
T_9999 = (253402214400, 999999999)  # 9999-12-31T00:00:00Z

FILE_A = prand(0xA11, 100000)  # content of N_NL
ENC_PLAIN = (b"encoded write payload, zlib, repeated text. " * 400)[:16384]
ENC_ZLIB = zlib_fixed(ENC_PLAIN)
ENC_DISK = ENC_ZLIB + bytes(-len(ENC_ZLIB) % 4096)  # padded to a sector
ENC_INLINE = b"inline extent: tiny, tiny, tiny, tiny, tiny zlib data (no ENCRYPTION attribute)\n"
ENC_INLINE_ZLIB = zlib_fixed(ENC_INLINE)
XATTR_BIN = b"\x00\x01\x02\xff\xfe\n\t \\binary\x7f\x80\x00end"
VERITY_SALT = prand(0x5A17, 32)
VERITY_SIG = b""


def utimes(path, a, m, c, o, version):
    attrs = [("PATH", path), ("ATIME", ts(*a)), ("MTIME", ts(*m)),
             ("CTIME", ts(*c))]
    if version >= 2:
        attrs.append(("OTIME", ts(*o)))
    return Cmd("UTIMES", *attrs)


def new_inode(kind, ino, final, gen, extra=()):
    orphan = b"o%d-%d-0" % (ino, gen)
    return [Cmd(kind, ("PATH", orphan), ("INO", u64(ino)), *extra),
            Cmd("RENAME", ("PATH", orphan), ("PATH_TO", final))]


def rdev(major, minor):  # kernel new_encode_dev
    return (minor & 0xFF) | (major << 8) | ((minor & ~0xFF) << 12)


def all_streams(version):
    """The streams of all-v<version>.stream; v3 adds ENABLE_VERITY."""
    v = version
    G = 100
    s1 = [Cmd("SUBVOL", ("PATH", b"all"),
              ("UUID", U1), ("CTRANSID", u64(G))),
          Cmd("CHOWN", ("PATH", b""), ("UID", u64(0)), ("GID", u64(0))),
          Cmd("CHMOD", ("PATH", b""), ("MODE", u64(0o755)))]
    # 257: directory with a space
    s1 += new_inode("MKDIR", 257, N_DIR, G)
    s1 += [Cmd("CHOWN", ("PATH", N_DIR), ("UID", u64(1000)), ("GID", u64(1000))),
           Cmd("CHMOD", ("PATH", N_DIR), ("MODE", u64(0o2775)))]
    # 258: regular file with a newline in its name, 100000 bytes of data
    s1 += new_inode("MKFILE", 258, N_NL, G)
    chunk = 49152 if v == 1 else 131072
    for off in range(0, len(FILE_A), chunk):
        s1.append(Cmd("WRITE", ("PATH", N_NL), ("FILE_OFFSET", u64(off)),
                      ("DATA", FILE_A[off:off + chunk])))
    s1 += [Cmd("CHOWN", ("PATH", N_NL), ("UID", u64(1000)), ("GID", u64(100))),
           Cmd("CHMOD", ("PATH", N_NL), ("MODE", u64(0o644))),
           utimes(N_NL, T_2001, T_2038A, T_2038B, T_ZERO, v)]
    # 259: tab name; clone from 258, small write, truncate, hole, update_extent
    s1 += new_inode("MKFILE", 259, N_TAB, G)
    s1 += [Cmd("CLONE", ("FILE_OFFSET", u64(0)), ("CLONE_LEN", u64(65536)),
               ("PATH", N_TAB), ("CLONE_UUID", U1),
               ("CLONE_CTRANSID", u64(G)), ("CLONE_PATH", N_NL),
               ("CLONE_OFFSET", u64(0))),
           Cmd("WRITE", ("PATH", N_TAB), ("FILE_OFFSET", u64(65536)),
               ("DATA", b"tail\n")),
           Cmd("UPDATE_EXTENT", ("PATH", N_TAB), ("FILE_OFFSET", u64(65541)),
               ("SIZE", u64(4096)))]
    if v >= 2:
        s1.append(Cmd("FALLOCATE", ("PATH", N_TAB), ("FALLOCATE_MODE", u32(3)),
                      ("FILE_OFFSET", u64(8192)), ("SIZE", u64(4096))))
    s1 += [Cmd("TRUNCATE", ("PATH", N_TAB), ("SIZE", u64(131072))),
           Cmd("CHOWN", ("PATH", N_TAB), ("UID", u64(0)), ("GID", u64(0))),
           Cmd("CHMOD", ("PATH", N_TAB), ("MODE", u64(0o600))),
           utimes(N_TAB, T_MINUS1, T_ZERO, T_1960, T_MINUS1, v)]
    # 260: backslash name; xattrs (binary, empty, set+remove), hard link
    s1 += new_inode("MKFILE", 260, N_BSL, G)
    s1 += [Cmd("LINK", ("PATH", N_DEL), ("PATH_LINK", N_BSL)),
           Cmd("SET_XATTR", ("PATH", N_BSL), ("XATTR_NAME", b"user.binary"),
               ("XATTR_DATA", XATTR_BIN)),
           Cmd("SET_XATTR", ("PATH", N_BSL), ("XATTR_NAME", b"user.empty"),
               ("XATTR_DATA", b"")),
           Cmd("SET_XATTR", ("PATH", N_BSL),
               ("XATTR_NAME", b"user.odd name\t\xc3\xa9"),
               ("XATTR_DATA", b"text value")),
           Cmd("SET_XATTR", ("PATH", N_BSL), ("XATTR_NAME", b"user.gone"),
               ("XATTR_DATA", b"x")),
           Cmd("REMOVE_XATTR", ("PATH", N_BSL), ("XATTR_NAME", b"user.gone")),
           Cmd("CHOWN", ("PATH", N_BSL), ("UID", u64(4294967294)),
               ("GID", u64(65534))),
           Cmd("CHMOD", ("PATH", N_BSL), ("MODE", u64(0o4755))),
           utimes(N_BSL, T_2100, T_9999, T_1944, T_2001, v)]
    # 261: symlink with 0xff in its name, target with UTF-8 and space
    s1 += new_inode("SYMLINK", 261, N_FF, G,
                    [("PATH_LINK", b"../caf\xc3\xa9 target/" + N_NL)])
    s1 += [Cmd("CHOWN", ("PATH", N_FF), ("UID", u64(1000)), ("GID", u64(1000))),
           utimes(N_FF, T_2038B, T_2038B, T_2038B, T_2038B, v)]
    # 262..265: devices, fifo, socket
    s1 += new_inode("MKNOD", 262, N_CHR, G,
                    [("RDEV", u64(rdev(1, 3))), ("MODE", u64(0o20644))])
    s1 += [Cmd("CHOWN", ("PATH", N_CHR), ("UID", u64(0)), ("GID", u64(0))),
           Cmd("CHMOD", ("PATH", N_CHR), ("MODE", u64(0o644)))]
    s1 += new_inode("MKNOD", 263, N_BLK, G,
                    [("RDEV", u64(rdev(259, 300))), ("MODE", u64(0o60640))])
    s1 += [Cmd("CHOWN", ("PATH", N_BLK), ("UID", u64(0)), ("GID", u64(6))),
           Cmd("CHMOD", ("PATH", N_BLK), ("MODE", u64(0o640)))]
    s1 += new_inode("MKFIFO", 264, N_FIFO, G,
                    [("RDEV", u64(0)), ("MODE", u64(0o10644))])
    s1 += [Cmd("CHOWN", ("PATH", N_FIFO), ("UID", u64(0)), ("GID", u64(0))),
           Cmd("CHMOD", ("PATH", N_FIFO), ("MODE", u64(0o644)))]
    s1 += new_inode("MKSOCK", 265, N_SOCK, G,
                    [("RDEV", u64(0)), ("MODE", u64(0o140755))])
    s1 += [Cmd("CHOWN", ("PATH", N_SOCK), ("UID", u64(0)), ("GID", u64(0))),
           Cmd("CHMOD", ("PATH", N_SOCK), ("MODE", u64(0o755)))]
    # 266: UTF-8 name; encoded writes (v2+), fileattr, enable_verity (v3)
    s1 += new_inode("MKFILE", 266, N_CAFE, G)
    if v >= 2:
        s1 += [Cmd("ENCODED_WRITE", ("PATH", N_CAFE), ("FILE_OFFSET", u64(0)),
                   ("UNENCODED_FILE_LEN", u64(len(ENC_PLAIN))),
                   ("UNENCODED_LEN", u64(len(ENC_PLAIN))),
                   ("UNENCODED_OFFSET", u64(0)), ("COMPRESSION", u32(1)),
                   ("ENCRYPTION", u32(0)), ("DATA", ENC_DISK)),
               # inline-extent style: unpadded zlib data, ENCRYPTION omitted
               # (the parser must default it to 0).  COMPRESSION is kept:
               # without it compression defaults to NONE (0), which the kernel
               # never sends and which real `btrfs receive` rejects ("unknown
               # compression: 0") after the ioctl refuses it.
               Cmd("ENCODED_WRITE", ("PATH", N_CAFE),
                   ("FILE_OFFSET", u64(len(ENC_PLAIN))),
                   ("UNENCODED_FILE_LEN", u64(len(ENC_INLINE))),
                   ("UNENCODED_LEN", u64(len(ENC_INLINE))),
                   ("UNENCODED_OFFSET", u64(0)), ("COMPRESSION", u32(1)),
                   ("DATA", ENC_INLINE_ZLIB))]
    else:
        s1 += [Cmd("WRITE", ("PATH", N_CAFE), ("FILE_OFFSET", u64(0)),
                   ("DATA", ENC_PLAIN)),
               Cmd("WRITE", ("PATH", N_CAFE),
                   ("FILE_OFFSET", u64(len(ENC_PLAIN))), ("DATA", ENC_INLINE))]
    s1 += [Cmd("CHOWN", ("PATH", N_CAFE), ("UID", u64(0)), ("GID", u64(0))),
           Cmd("CHMOD", ("PATH", N_CAFE), ("MODE", u64(0o444)))]
    if v >= 2:
        # NODUMP|NOATIME = 0x300 -> progs prints "fileattr=0x768"
        s1.append(Cmd("FILEATTR", ("PATH", N_CAFE), ("FILEATTR", u64(0x300))))
    if v >= 3:
        s1.append(Cmd("ENABLE_VERITY", ("PATH", N_CAFE),
                      ("VERITY_ALGORITHM", u8(1)),
                      ("VERITY_BLOCK_SIZE", u32(4096)),
                      ("VERITY_SALT_DATA", VERITY_SALT),
                      ("VERITY_SIG_DATA", VERITY_SIG)))
    s1.append(utimes(N_CAFE, T_1944, T_1960, T_2100, T_9999, v))
    # 267 / 268: created and removed again
    s1 += [Cmd("MKDIR", ("PATH", b"o267-100-0"), ("INO", u64(267))),
           Cmd("RMDIR", ("PATH", b"o267-100-0")),
           Cmd("MKFILE", ("PATH", b"o268-100-0"), ("INO", u64(268))),
           Cmd("UNLINK", ("PATH", b"o268-100-0"))]
    # deferred directory utimes, then END
    s1 += [utimes(N_DIR, T_2001, T_2001, T_2001, T_2001, v),
           utimes(b"", T_ZERO, T_2038A, T_9999, T_ZERO, v),
           Cmd("END")]

    # second stream: an empty subvolume (header + SUBVOL + END)
    s2 = [Cmd("SUBVOL", ("PATH", b"second"), ("UUID", U2), ("CTRANSID", u64(7))),
          Cmd("END")]

    # third stream: incremental snapshot of the first subvolume
    s3 = [Cmd("SNAPSHOT", ("PATH", b"incr snap"), ("UUID", U3),
              ("CTRANSID", u64(120)), ("CLONE_UUID", U1),
              ("CLONE_CTRANSID", u64(G))),
          Cmd("RENAME", ("PATH", N_CAFE), ("PATH_TO", N_DIR + b"/" + N_CAFE)),
          Cmd("UNLINK", ("PATH", N_DEL)),
          Cmd("CLONE", ("FILE_OFFSET", u64(4096)), ("CLONE_LEN", u64(4096)),
              ("PATH", N_BSL), ("CLONE_UUID", U1), ("CLONE_CTRANSID", u64(G)),
              ("CLONE_PATH", N_NL), ("CLONE_OFFSET", u64(8192))),
          utimes(N_BSL, T_2001, T_2001, T_2001, T_2001, v),
          utimes(N_DIR, T_2038B, T_2038B, T_2038B, T_2038B, v),
          utimes(b"", T_2038B, T_2038B, T_2038B, T_2038B, v),
          Cmd("END")]
    return [(v, s1), (v, s2), (v, s3)]


def empty_subvol_v1():
    return [(1, [Cmd("SUBVOL", ("PATH", b"empty"), ("UUID", U4),
                     ("CTRANSID", u64(8))),
                 Cmd("CHOWN", ("PATH", b""), ("UID", u64(0)), ("GID", u64(0))),
                 Cmd("CHMOD", ("PATH", b""), ("MODE", u64(0o755))),
                 utimes(b"", T_2001, T_2001, T_2001, T_2001, 1),
                 Cmd("END")])]


# ---------------------------------------------------------------------------
# `btrfs receive --dump` formatting, only what all-v3.dump needs (6.3)

_ESC = {0x07: b"\\a", 0x08: b"\\b", 0x1B: b"\\e", 0x0C: b"\\f", 0x0A: b"\\n",
        0x0D: b"\\r", 0x09: b"\\t", 0x0B: b"\\v", 0x20: b"\\ ", 0x5C: b"\\\\"}


def dump_escape(path):
    out = bytearray()
    for c in path:
        if c in _ESC:
            out += _ESC[c]
        elif 0x20 <= c <= 0x7E:
            out.append(c)
        else:
            out += b"\\%03o" % c
    return bytes(out)


def dump_line(op, full_path, fields):
    esc = dump_escape(full_path)
    line = op.encode().ljust(16) + esc
    if fields is None:
        return line + b"\n"
    return line + b" " * max(1, 32 - len(esc)) + fields.encode() + b"\n"


def dump_path(prefix, path):  # progs path_cat_out: strip one trailing '/'
    if prefix.endswith(b"/"):
        prefix = prefix[:-1]
    if path.endswith(b"/"):
        path = path[:-1]
    return prefix + b"/" + path


def verity_dump_insert(streams, dump_text):
    """Insert the enable_verity line into the progs dump of the same streams
    without the ENABLE_VERITY command."""
    lines = dump_text.split(b"\n")
    assert lines[-1] == b""
    lines = [l + b"\n" for l in lines[:-1]]
    idx = 0
    prefix = b"."
    for _, cmds in streams:
        for c in cmds:
            attrs = dict(c.attrs)
            if c.name in ("SUBVOL", "SNAPSHOT"):
                prefix = dump_path(b".", attrs["PATH"])
            if c.name == "ENABLE_VERITY":
                fields = "algorithm=%d block_size=%d salt_len=%d sig_len=%d" % (
                    attrs["VERITY_ALGORITHM"][0],
                    struct.unpack("<I", attrs["VERITY_BLOCK_SIZE"])[0],
                    len(attrs["VERITY_SALT_DATA"]),
                    len(attrs["VERITY_SIG_DATA"]))
                line = dump_line("enable_verity",
                                 dump_path(prefix, attrs["PATH"]), fields)
                # sanity: the progs line of the following command on the same
                # path must share our escaped path + padding
                nxt = lines[idx]
                assert nxt[16:48] == line[16:48], (nxt, line)
                lines.insert(idx, line)
                idx += 1
                continue
            if c.name != "END":
                idx += 1
    assert idx == len(lines)
    return b"".join(lines)


# ---------------------------------------------------------------------------
# Broken streams


def base_cmds():
    return [Cmd("SUBVOL", ("PATH", b"broken"), ("UUID", U3), ("CTRANSID", u64(5))),
            Cmd("MKFILE", ("PATH", b"o257-5-0"), ("INO", u64(257))),
            Cmd("RENAME", ("PATH", b"o257-5-0"), ("PATH_TO", b"file")),
            Cmd("WRITE", ("PATH", b"file"), ("FILE_OFFSET", u64(0)),
                ("DATA", prand(0xB0B, 3000))),
            Cmd("CHMOD", ("PATH", b"file"), ("MODE", u64(0o644))),
            utimes(b"file", T_2001, T_2001, T_2001, T_2001, 1),
            Cmd("END")]


class Broken:
    def __init__(self, name, data, offset, command, valid, desc):
        self.name, self.data, self.offset = name, data, offset
        self.command, self.valid, self.desc = command, valid, desc


def encode_list(cmds, version):
    """-> (bytes of commands, list of start offsets relative to 0)"""
    out, offs = bytearray(), []
    for c in cmds:
        offs.append(len(out))
        out += c if isinstance(c, bytes) else c.encode(version)
    return bytes(out), offs


def with_header(version, cmds):
    body, offs = encode_list(cmds, version)
    return stream_header(version) + body, [o + 17 for o in offs]


def broken_streams():
    res = []
    V = 1
    base, offs = with_header(V, base_cmds())
    ncmd = len(offs)

    # bad CRC: flip the last payload byte of command 3 (RENAME)
    d = bytearray(base)
    end3 = offs[3]
    d[end3 - 1] ^= 0x01
    res.append(Broken("bad-crc", bytes(d), offs[2], 3, 2,
                      "v1; 3rd command (RENAME) has its last payload byte "
                      "flipped; CRC no longer matches"))

    # truncated mid-command: v2 stream cut in the middle of WRITE's payload
    b2, o2 = with_header(2, base_cmds())
    wlen = struct.unpack_from("<I", b2, o2[3])[0]
    cut = o2[3] + 10 + wlen // 2
    res.append(Broken("truncated-mid-command", b2[:cut], o2[3], 4, 3,
                      "v2; file ends %d bytes into the %d-byte payload of the "
                      "4th command (WRITE)" % (wlen // 2, wlen)))

    # truncated command header: 4 bytes into the 3rd command header
    res.append(Broken("truncated-cmd-header", base[:offs[2] + 4], offs[2], 3, 2,
                      "v1; file ends 4 bytes into the 10-byte header of the "
                      "3rd command"))

    # truncated stream header
    res.append(Broken("truncated-stream-header", base[:9], 0, 1, 0,
                      "only the first 9 bytes of the 17-byte stream header"))

    # bad magic
    res.append(Broken("bad-magic", b"btrfs-streem\0" + base[13:], 0, 1, 0,
                      "magic is 'btrfs-streem\\0' instead of 'btrfs-stream\\0'; "
                      "rest is a valid v1 stream"))

    # unsupported version
    res.append(Broken("unsupported-version", stream_header(4) + base[17:], 0, 1, 0,
                      "stream header version 4; rest is a valid v1 stream"))

    # unknown command 200 as 3rd command, correct CRC
    cmds = base_cmds()
    unk = command(200, tlv(A["PATH"], b"file", V))
    cmds.insert(2, unk)
    d, o = with_header(V, cmds)
    res.append(Broken("unknown-command", d, o[2], 3, 2,
                      "v1; 3rd command has command number 200 (PATH=file), "
                      "correct CRC; the remaining commands are valid"))

    # oversized length field
    cmds = base_cmds()
    hdr = struct.pack("<IHI", 0xFFFFFFF0, C["RENAME"], 0)
    d = base[:offs[2]] + hdr + base[offs[2] + 10:]
    res.append(Broken("oversized-length", d, offs[2], 3, 2,
                      "v1; 3rd command header declares len=0xFFFFFFF0 (crc 0); "
                      "file ends %d bytes later" % (len(d) - offs[2] - 10)))

    # > 64 MiB command declared
    hdr = struct.pack("<IHI", 100 * 1024 * 1024, C["WRITE"], 0)
    d = base[:offs[3]] + hdr + base[offs[3] + 10:]
    res.append(Broken("huge-command", d, offs[3], 4, 3,
                      "v1; 4th command (WRITE) header declares len=104857600 "
                      "(100 MiB, crc 0); file ends %d bytes later"
                      % (len(d) - offs[3] - 10)))

    # missing required attribute: WRITE without FILE_OFFSET (v2)
    cmds = base_cmds()
    cmds[3] = Cmd("WRITE", ("PATH", b"file"), ("DATA", prand(0xB0B, 3000)))
    d, o = with_header(2, cmds)
    res.append(Broken("missing-attribute", d, o[3], 4, 3,
                      "v2; 4th command WRITE has PATH and DATA but no "
                      "FILE_OFFSET (attribute 18); correct CRC"))

    # wrong attribute size: CHMOD MODE 4 bytes
    cmds = base_cmds()
    cmds[4] = Cmd("CHMOD", ("PATH", b"file"), ("MODE", u32(0o644)))
    d, o = with_header(V, cmds)
    res.append(Broken("wrong-attr-size", d, o[4], 5, 4,
                      "v1; 5th command CHMOD has a 4-byte MODE (u64 expected); "
                      "correct CRC"))

    # TLV length past the end of the command (correct CRC)
    cmds = base_cmds()
    payload = tlv(A["PATH"], b"o257-5-0", V) + raw_tlv(A["PATH_TO"], 200, b"file")
    cmds[2] = command(C["RENAME"], payload)
    d, o = with_header(V, cmds)
    res.append(Broken("tlv-overrun", d, o[2], 3, 2,
                      "v1; 3rd command RENAME: PATH_TO TLV declares 200 bytes "
                      "but only 4 remain in the command; correct CRC"))

    # TLV type 0 / 99
    for t in (0, 99):
        cmds = base_cmds()
        payload = raw_tlv(t, 2, b"xx") + tlv(A["PATH"], b"file", V) + \
            tlv(A["MODE"], u64(0o644), V)
        cmds[4] = command(C["CHMOD"], payload)
        d, o = with_header(V, cmds)
        res.append(Broken("tlv-type-%d" % t, d, o[4], 5, 4,
                          "v1; 5th command CHMOD starts with a TLV of type %d "
                          "(len 2) before valid PATH and MODE; correct CRC" % t))

    # empty input
    res.append(Broken("empty", b"", 0, 1, 0, "0-byte file"))

    # garbage
    res.append(Broken("garbage", prand(0x6A7BA6E, 4096), 0, 1, 0,
                      "4096 bytes of xorshift64* output (seed 0x6A7BA6E); no "
                      "stream header"))

    # clean EOF at a command boundary, no END
    d = base[:offs[-1]]
    res.append(Broken("no-end", d, len(d), ncmd, ncmd - 1,
                      "v1; the %d commands before END are complete and valid, "
                      "then EOF at a command boundary (no END)" % (ncmd - 1)))

    # v1 stream containing FALLOCATE
    cmds = base_cmds()
    cmds.insert(4, Cmd("FALLOCATE", ("PATH", b"file"), ("FALLOCATE_MODE", u32(3)),
                       ("FILE_OFFSET", u64(0)), ("SIZE", u64(4096))))
    d, o = with_header(1, cmds)
    res.append(Broken("v1-with-v2-command", d, o[4], 5, 4,
                      "v1 header; 5th command is FALLOCATE (23, v2-only), "
                      "correct CRC; the rest is valid"))

    # concatenated stream with garbage second header
    tail_cmds = [Cmd("SUBVOL", ("PATH", b"after"), ("UUID", U2),
                     ("CTRANSID", u64(6))), Cmd("END")]
    tail, _ = encode_list(tail_cmds, 1)
    d = base + prand(0x2ED, 17) + tail
    res.append(Broken("concat-garbage-header", d, len(base), ncmd + 1, ncmd,
                      "a complete valid v1 stream (%d commands incl. END), then "
                      "17 pseudo-random bytes where the 2nd stream header "
                      "should be, then SUBVOL+END" % ncmd))
    return res


# ---------------------------------------------------------------------------


def write(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def progs_dump(path, tz):
    env = dict(os.environ, TZ=tz, LC_ALL="C")
    p = subprocess.run(["btrfs", "receive", "--dump", "-f", path],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    return p.returncode, p.stdout, p.stderr


def progs_dump_bytes(data, tz):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s.stream")
        with open(path, "wb") as f:
            f.write(data)
        return progs_dump(path, tz)


def progs_dump_each(streams, tz):
    """progs dump of every stream of a concatenation, fed one at a time."""
    out = b""
    for st in streams:
        rc, o, err = progs_dump_bytes(build([st])[0], tz)
        if rc != 0 or err:
            sys.exit("progs rejected a sub-stream: rc=%d %s" % (rc, err))
        out += o
    return out


def main():
    use_progs = "--no-progs" not in sys.argv[1:] and shutil.which("btrfs")
    if not use_progs:
        print("note: not running btrfs-progs; expected outputs left as they are",
              file=sys.stderr)
    os.makedirs(OUT, exist_ok=True)

    # sanity of the deflate encoder (decoding with the stdlib is deterministic)
    import zlib
    assert zlib.decompress(ENC_ZLIB) == ENC_PLAIN
    assert zlib.decompressobj().decompress(ENC_DISK) == ENC_PLAIN
    assert zlib.decompress(ENC_INLINE_ZLIB) == ENC_INLINE

    valid = {}
    for v in (1, 2, 3):
        data, _ = build(all_streams(v))
        valid["all-v%d" % v] = data
    valid["empty-subvol-v1"] = build(empty_subvol_v1())[0]
    # all-v3 without ENABLE_VERITY, with v2 headers, must equal all-v2
    v3 = all_streams(3)
    v3_as_v2_noverity = [(2, [c for c in cmds if c.name != "ENABLE_VERITY"])
                         for _, cmds in v3]
    assert build(v3_as_v2_noverity)[0] == valid["all-v2"]
    for name, data in valid.items():
        write(name + ".stream", data)

    if use_progs:
        zones = (("UTC", ""), ("Asia/Kolkata", ".kolkata"))
        # Note: `btrfs receive --dump` processes only the FIRST stream of a
        # concatenation: it stops at the first END and ignores the rest (it
        # calls btrfs_read_and_process_send_stream once; only the real
        # receive loops over stream headers).  So <name>.dump covers stream
        # 1 only, and <name>.dump.all-streams (+ .kolkata) is the
        # concatenation of the progs dumps of each stream fed separately,
        # i.e. what a dumper that follows concatenated streams prints.
        for name, streams in (("all-v1", all_streams(1)),
                              ("all-v2", all_streams(2)),
                              ("empty-subvol-v1", empty_subvol_v1())):
            path = os.path.join(OUT, name + ".stream")
            for tz, zs in zones:
                rc, out, err = progs_dump(path, tz)
                if rc != 0 or err:
                    sys.exit("progs rejected %s (TZ=%s): rc=%d %s"
                             % (name, tz, rc, err.decode(errors="replace")))
                write(name + ".dump" + zs, out)
                if zs == "":
                    write(name + ".dump.rc", b"%d\n" % rc)
                if len(streams) > 1:
                    write(name + ".dump.all-streams" + zs,
                          progs_dump_each(streams, tz))
        # progs (release build) must refuse version 3
        rc, _, err = progs_dump(os.path.join(OUT, "all-v3.stream"), "UTC")
        print("progs on all-v3.stream: rc=%d %s" % (rc, err.decode().strip()),
              file=sys.stderr)
        v3_as_v2 = [(2, cmds) for _, cmds in v3]
        for tz, zs in zones:
            for sfx, covered in ((".dump", v3[:1]), (".dump.all-streams", v3)):
                with open(os.path.join(OUT, "all-v2" + sfx + zs), "rb") as f:
                    v2dump = f.read()
                v3dump = verity_dump_insert(covered, v2dump)
                write("all-v3" + sfx + zs, v3dump)
                # cross-check: progs on v2-header copies keeping ENABLE_VERITY
                if sfx == ".dump":
                    rc, out, err = progs_dump_bytes(build(v3_as_v2)[0], tz)
                else:
                    rc, out, err = 0, progs_dump_each(v3_as_v2, tz), b""
                assert rc == 0 and out == v3dump, ("v3 cross-check", rc, err)

    rows = []
    for br in broken_streams():
        fname = "broken-%s.stream" % br.name
        write(fname, br.data)
        path = os.path.join(OUT, fname)
        if use_progs:
            rc, out, err = progs_dump(path, "UTC")
            write(fname + ".progs.out", out)
            write(fname + ".progs.err", err)
            write(fname + ".progs.rc", b"%d\n" % rc)
        try:
            with open(path + ".progs.rc") as f:
                prc = f.read().strip()
        except OSError:
            prc = "NA"
        rows.append((fname, br.offset, br.command, br.valid, prc, br.desc))
    with open(os.path.join(OUT, "broken.tsv"), "w", encoding="utf-8") as f:
        f.write("file\toffset\tcommand\tvalid_commands\tprogs_rc\tdescription\n")
        for r in rows:
            f.write("\t".join(str(x) for x in r) + "\n")


if __name__ == "__main__":
    main()
