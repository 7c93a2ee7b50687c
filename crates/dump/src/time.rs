//! Timestamps as `btrfs receive --dump` prints them: local time under `TZ`,
//! `strftime("%FT%T%z")`, seconds only.

use chrono::{Local, LocalResult, TimeZone};

/// Appends `sec` formatted in local time; `None` when it cannot be represented.
pub fn format_local(out: &mut Vec<u8>, sec: i64) -> Option<()> {
    use std::io::Write;
    let t = match Local.timestamp_opt(sec, 0) {
        LocalResult::Single(t) => t,
        LocalResult::Ambiguous(t, _) => t,
        LocalResult::None => return None,
    };
    write!(out, "{}", t.format("%Y-%m-%dT%H:%M:%S%z")).ok()
}
