//! File types of an inode's mode (include/uapi/linux/stat.h) and device
//! numbers as send.c puts them in MKNOD (new_encode_dev).

pub(super) const S_IFMT: u32 = 0o170000;
pub(super) const S_IFREG: u32 = 0o100000;
pub(super) const S_IFDIR: u32 = 0o040000;
pub(super) const S_IFLNK: u32 = 0o120000;
pub(super) const S_IFCHR: u32 = 0o020000;
pub(super) const S_IFBLK: u32 = 0o060000;
pub(super) const S_IFIFO: u32 = 0o010000;
pub(super) const S_IFSOCK: u32 = 0o140000;

/// The kernel's new_encode_dev of a dev_t stored as major << 20 | minor.
pub(super) fn new_encode_dev(rdev: u64) -> u64 {
    let major = (rdev >> 20) & 0xfff;
    let minor = rdev & 0xfffff;
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdev_is_encoded_as_the_kernel_does() {
        let dev = |ma: u64, mi: u64| (ma << 20) | mi;
        assert_eq!(new_encode_dev(dev(1, 3)), 0x103);
        assert_eq!(new_encode_dev(dev(7, 200)), 0x7c8);
        assert_eq!(new_encode_dev(dev(250, 300)), 0x10fa2c);
        assert_eq!(new_encode_dev(dev(259, 70000)), 0x11110370);
    }
}
