//! Byte strings (names, paths, xattr values) as JSON values, losslessly.

use serde_json::{json, Value};

/// `b` as a JSON string when it is valid UTF-8, and otherwise as an object
/// `{"hex": "<lowercase hex of the raw bytes>"}`, so no byte is lost.
pub fn bytes_value(b: &[u8]) -> Value {
    match std::str::from_utf8(b) {
        Ok(s) => Value::String(s.to_owned()),
        Err(_) => json!({ "hex": crate::hex::encode(b) }),
    }
}

/// The bytes a value of [`bytes_value`] stands for; `None` when it is
/// neither form.
pub fn value_bytes(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        v => crate::hex::decode(v.get("hex")?.as_str()?).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_as_a_string_and_other_bytes_as_hex() {
        assert_eq!(bytes_value("a bé".as_bytes()), json!("a bé"));
        assert_eq!(bytes_value(b"a b\xff"), json!({ "hex": "612062ff" }));
        assert_eq!(bytes_value(b""), json!(""));
        for b in [&b"a b"[..], b"a b\xff", b""] {
            assert_eq!(value_bytes(&bytes_value(b)).as_deref(), Some(b));
        }
    }
}
