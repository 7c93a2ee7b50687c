//! The escaping btrfs-progs applies to paths and names in `--dump` output
//! (btrfs-progs cmds/receive-dump.c): `a b\xff` is `a\ b\377`.
//!
//! C escapes for `\a \b \e \f \n \r \t \v`, a backslash before space and
//! backslash, and three octal digits for every other byte that is not
//! printable ASCII (all bytes from 0x7f up). The result is printable ASCII
//! without tabs or newlines, so it fits in a tab-separated line.

/// How each byte is printed: 0 as itself, 1 as octal, else a backslash and
/// this letter.
const CLASS: [u8; 256] = {
    let mut t = [1u8; 256];
    let mut c = 0x20;
    while c < 0x7f {
        t[c] = 0;
        c += 1;
    }
    t[0x07] = b'a';
    t[0x08] = b'b';
    t[0x1b] = b'e';
    t[0x0c] = b'f';
    t[b'\n' as usize] = b'n';
    t[b'\r' as usize] = b'r';
    t[b'\t' as usize] = b't';
    t[0x0b] = b'v';
    t[b' ' as usize] = b' ';
    t[b'\\' as usize] = b'\\';
    t
};

/// Appends the escaped form of `s` to `out`; returns its length in bytes.
pub fn escape_into(out: &mut Vec<u8>, s: &[u8]) -> usize {
    let before = out.len();
    let mut plain = 0;
    for (i, &c) in s.iter().enumerate() {
        let class = CLASS[c as usize];
        if class == 0 {
            continue;
        }
        out.extend_from_slice(&s[plain..i]);
        plain = i + 1;
        if class == 1 {
            out.extend_from_slice(&[
                b'\\',
                b'0' + (c >> 6),
                b'0' + ((c >> 3) & 7),
                b'0' + (c & 7),
            ]);
        } else {
            out.extend_from_slice(&[b'\\', class]);
        }
    }
    out.extend_from_slice(&s[plain..]);
    out.len() - before
}

/// The escaped form of `s`, as a string.
pub fn escape(s: &[u8]) -> String {
    let mut out = Vec::with_capacity(s.len());
    escape_into(&mut out, s);
    // Every byte written is printable ASCII.
    out.into_iter().map(char::from).collect()
}

/// The bytes an escaped form stands for: the inverse of [`escape_into`].
/// A backslash before anything [`escape_into`] never writes after one is
/// kept as it is.
pub fn unescape(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        let next = s.get(i + 1).copied();
        let octal = s
            .get(i + 1..i + 4)
            .filter(|d| d[0] <= b'3' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        let plain = match next {
            _ if c != b'\\' => None,
            Some(b'a') => Some(0x07),
            Some(b'b') => Some(0x08),
            Some(b'e') => Some(0x1b),
            Some(b'f') => Some(0x0c),
            Some(b'n') => Some(b'\n'),
            Some(b'r') => Some(b'\r'),
            Some(b't') => Some(b'\t'),
            Some(b'v') => Some(0x0b),
            Some(b' ') => Some(b' '),
            Some(b'\\') => Some(b'\\'),
            _ => None,
        };
        if let Some(b) = plain {
            out.push(b);
            i += 2;
        } else if let (b'\\', Some(d)) = (c, octal) {
            out.push((d[0] - b'0') << 6 | (d[1] - b'0') << 3 | (d[2] - b'0'));
            i += 4;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The bytes of `s` up to its first NUL, as C string functions see them.
pub fn c_str(s: &[u8]) -> &[u8] {
    match s.iter().position(|&b| b == 0) {
        Some(n) => &s[..n],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn esc(s: &[u8]) -> String {
        let mut v = Vec::new();
        let n = escape_into(&mut v, s);
        assert_eq!(n, v.len());
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn control_space_backslash_and_high_bytes() {
        assert_eq!(esc(b"a b"), "a\\ b");
        assert_eq!(esc(b"x\ny\tz"), "x\\ny\\tz");
        assert_eq!(esc(b"\\"), "\\\\");
        assert_eq!(esc(&[0xff, 0xfe, 0x7f, 0x01]), "\\377\\376\\177\\001");
        assert_eq!(esc("é".as_bytes()), "\\303\\251");
        assert_eq!(
            esc(&[0x07, 0x08, 0x1b, 0x0c, 0x0d, 0x0b]),
            "\\a\\b\\e\\f\\r\\v"
        );
    }

    #[test]
    fn unescape_undoes_escape() {
        for s in [
            &b"a b"[..],
            b"x\ny\tz\\",
            &[0xff, 0x07, 0x1b, 0x7f, 0x01, b'q'],
            b"",
        ] {
            assert_eq!(unescape(escape(s).as_bytes()), s);
        }
        assert_eq!(unescape(b"a\\q\\"), b"a\\q\\");
    }

    #[test]
    fn as_a_string() {
        assert_eq!(escape(b"a b\xff"), "a\\ b\\377");
        assert_eq!(escape(b""), "");
    }

    #[test]
    fn c_str_stops_at_the_first_nul() {
        assert_eq!(c_str(b"ab\0cd"), b"ab");
        assert_eq!(c_str(b"ab"), b"ab");
    }
}
