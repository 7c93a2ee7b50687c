//! The fs-verity descriptor (`struct fsverity_descriptor`), as btrfs keeps
//! it in VERITY_DESC_ITEMs: what ENABLE_VERITY (v3) carries of it.

/// Largest descriptor the kernel reads back (FS_VERITY_MAX_DESCRIPTOR_SIZE).
pub(crate) const MAX_DESCRIPTOR: usize = 16384;

/// Fixed part of the descriptor, before the signature.
const FIXED: usize = 256;
/// Offset of the salt (after version, algorithm, log block size, salt
/// size, signature size, data size and the 64-byte root hash).
const SALT_AT: usize = 80;
/// Room for the salt.
const SALT_MAX: usize = 32;

/// The fields of a descriptor that ENABLE_VERITY carries.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Descriptor<'a> {
    /// FS_VERITY_HASH_ALG_* (1 SHA-256, 2 SHA-512).
    pub(crate) algorithm: u8,
    /// Merkle tree block size in bytes.
    pub(crate) block_size: u32,
    /// Salt prepended to each hashed block (may be empty).
    pub(crate) salt: &'a [u8],
    /// PKCS#7 signature (may be empty).
    pub(crate) signature: &'a [u8],
}

impl<'a> Descriptor<'a> {
    /// Reads `d`, checking its version and sizes.
    pub(crate) fn parse(d: &'a [u8]) -> Result<Descriptor<'a>, String> {
        if d.len() > MAX_DESCRIPTOR {
            return Err(format!(
                "larger than the {MAX_DESCRIPTOR} bytes fs-verity allows"
            ));
        }
        if d.len() < FIXED {
            return Err(format!("shorter than the {FIXED} bytes of its fixed part"));
        }
        if d[0] != 1 {
            return Err(format!("version {} (only 1 exists)", d[0]));
        }
        let log_blocksize = d[2];
        if !(10..=16).contains(&log_blocksize) {
            return Err(format!(
                "Merkle block size 2^{log_blocksize} (fs-verity uses 1 KiB to 64 KiB)"
            ));
        }
        let salt_size = usize::from(d[3]);
        if salt_size > SALT_MAX {
            return Err(format!("salt of {salt_size} bytes (at most {SALT_MAX})"));
        }
        let sig_size = u32::from_le_bytes([d[4], d[5], d[6], d[7]]) as usize;
        let signature = d
            .get(FIXED..)
            .and_then(|s| s.get(..sig_size))
            .ok_or_else(|| {
                format!(
                    "signature of {sig_size} bytes but only {} follow the fixed part",
                    d.len() - FIXED
                )
            })?;
        Ok(Descriptor {
            algorithm: d[1],
            block_size: 1u32 << log_blocksize,
            salt: &d[SALT_AT..SALT_AT + salt_size],
            signature,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn descriptor(salt: &[u8], sig: &[u8]) -> Vec<u8> {
        let mut d = vec![0u8; FIXED];
        d[0] = 1;
        d[1] = 2;
        d[2] = 12;
        d[3] = salt.len() as u8;
        d[4..8].copy_from_slice(&(sig.len() as u32).to_le_bytes());
        d[8..16].copy_from_slice(&5000u64.to_le_bytes());
        d[16..80].fill(0xab);
        d[SALT_AT..SALT_AT + salt.len()].copy_from_slice(salt);
        d.extend_from_slice(sig);
        d
    }

    #[test]
    fn fields_come_from_their_offsets() {
        let d = descriptor(b"pepper", b"signed");
        assert_eq!(
            Descriptor::parse(&d),
            Ok(Descriptor {
                algorithm: 2,
                block_size: 4096,
                salt: b"pepper",
                signature: b"signed",
            })
        );
    }

    #[test]
    fn bad_descriptors_are_refused() {
        let mut d = descriptor(b"", b"");
        d[0] = 2;
        assert!(Descriptor::parse(&d).unwrap_err().contains("version 2"));
        let mut d = descriptor(b"", b"");
        d[3] = 33;
        assert!(Descriptor::parse(&d).unwrap_err().contains("salt of 33"));
        let mut d = descriptor(b"", b"x");
        d[4] = 9;
        assert!(Descriptor::parse(&d)
            .unwrap_err()
            .contains("signature of 9"));
        assert!(Descriptor::parse(&d[..100])
            .unwrap_err()
            .contains("shorter"));
        let mut d = descriptor(b"", b"");
        d[2] = 30;
        assert!(Descriptor::parse(&d).unwrap_err().contains("2^30"));
    }
}
