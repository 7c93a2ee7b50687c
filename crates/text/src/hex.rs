//! Byte strings as lowercase hex digits, two a byte, and back.

/// Why [`decode`] refused its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HexError {
    /// An odd number of digits: the last byte is cut.
    #[error("{0} hex digits (an odd number)")]
    OddLength(usize),
    /// A character that is not a hex digit, at this byte offset.
    #[error("no hex digit at offset {0}")]
    NotHex(usize),
}

/// `b` as lowercase hex, two digits a byte; empty for an empty `b`.
pub fn encode(b: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    b.iter()
        .flat_map(|&x| [DIGITS[usize::from(x >> 4)], DIGITS[usize::from(x & 15)]])
        .map(char::from)
        .collect()
}

/// The bytes whose hex is `s` (digits in either case), the inverse of
/// [`encode`].
///
/// The empty string is the hex of the empty byte string, so it decodes to
/// no bytes: rreceive's side files write the subvolume root (the empty
/// path) that way. Where an empty value is wrong (a subvolume's name), the
/// caller refuses it.
pub fn decode(s: &str) -> Result<Vec<u8>, HexError> {
    let s = s.as_bytes();
    if !s.len().is_multiple_of(2) {
        return Err(HexError::OddLength(s.len()));
    }
    let digit = |i: usize| {
        char::from(s[i])
            .to_digit(16)
            .map(|d| d as u8)
            .ok_or(HexError::NotHex(i))
    };
    (0..s.len())
        .step_by(2)
        .map(|i| Ok(digit(i)? << 4 | digit(i + 1)?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_and_decodes_every_byte() {
        let all: Vec<u8> = (0..=255).collect();
        let text = encode(&all);
        assert_eq!(&text[..8], "00010203");
        assert_eq!(&text[text.len() - 4..], "feff");
        assert_eq!(decode(&text), Ok(all));
        assert_eq!(decode("A0fF"), Ok(vec![0xa0, 0xff]));
    }

    #[test]
    fn empty_is_the_empty_byte_string() {
        assert_eq!(encode(b""), "");
        assert_eq!(decode(""), Ok(Vec::new()));
    }

    #[test]
    fn refuses_what_is_not_hex() {
        assert_eq!(decode("abc"), Err(HexError::OddLength(3)));
        assert_eq!(decode("0g"), Err(HexError::NotHex(1)));
        // No sign, as u8::from_str_radix would take.
        assert_eq!(decode("+f"), Err(HexError::NotHex(0)));
        // Not ASCII: never split inside a character.
        assert_eq!(decode("é0"), Err(HexError::OddLength(3)));
        assert_eq!(decode("éé"), Err(HexError::NotHex(0)));
    }
}
