//! I/O errors in words, as the tools and their libraries say them.

use std::io;

/// An I/O error as words, without the OS's "(os error N)".
pub fn plain_io(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "no such file or directory".into(),
        io::ErrorKind::PermissionDenied => "permission denied".into(),
        io::ErrorKind::IsADirectory => "is a directory".into(),
        _ => {
            let s = e.to_string();
            match s.find(" (os error") {
                Some(i) => s[..i].to_string(),
                None => s,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn io_errors_in_words() {
        let e = std::io::Error::from_raw_os_error(2);
        assert_eq!(super::plain_io(&e), "no such file or directory");
        let e = std::io::Error::from_raw_os_error(28);
        assert_eq!(super::plain_io(&e), "No space left on device");
    }
}
