//! Timestamps as `btrfs receive --dump` prints them: glibc `localtime_r`
//! under `TZ`, then `strftime("%FT%T%z")`, whole seconds.
//!
//! The zone comes from `TZ` as glibc reads it (unset: `/etc/localtime`; empty
//! or unknown: UTC); `tz-rs` parses TZif files and POSIX strings. The offset
//! lookup and the calendar follow glibc's own rules, quirks included, so that
//! every representable time prints as btrfs-progs prints it: years without
//! zero padding, and glibc's C `int` arithmetic for far-future DST rules.

use tz::timezone::{AlternateTime, RuleDay, TransitionRule};
use tz::{LocalTimeType, TimeZone};

/// Where the zone came from, which decides glibc's lookup rules.
enum Zone {
    /// A TZif file: transitions, then the footer rule after the last one.
    File(TimeZone),
    /// A POSIX TZ string: its rule applies at every time.
    Rule(TransitionRule),
    /// `TZ` empty, or unusable.
    Utc,
}

/// Formats seconds since the epoch in the local zone.
pub struct LocalTime {
    zone: Zone,
    last: Option<(i64, Vec<u8>)>,
}

impl Default for LocalTime {
    fn default() -> Self {
        Self::from_env()
    }
}

const ZONEINFO: &str = "/usr/share/zoneinfo";

fn tzfile(path: &str) -> Option<Zone> {
    let bytes = std::fs::read(path).ok()?;
    TimeZone::from_tz_data(&bytes).ok().map(Zone::File)
}

impl LocalTime {
    /// The zone named by `TZ`, resolved as glibc's `tzset` does.
    pub fn from_env() -> Self {
        let zone = match std::env::var("TZ") {
            Err(_) => tzfile("/etc/localtime"),
            Ok(tz) if tz.is_empty() => None,
            Ok(tz) => {
                let name = tz.strip_prefix(':').unwrap_or(&tz);
                let path = if name.starts_with('/') {
                    name.to_owned()
                } else {
                    format!("{ZONEINFO}/{name}")
                };
                tzfile(&path).or_else(|| {
                    let tz = TimeZone::from_posix_tz(name).ok()?;
                    tz.as_ref().extra_rule().map(Zone::Rule)
                })
            }
        };
        LocalTime {
            zone: zone.unwrap_or(Zone::Utc),
            last: None,
        }
    }

    /// The UTC offset glibc's `localtime_r` uses at `sec`.
    fn offset(&self, sec: i64) -> i32 {
        match &self.zone {
            Zone::Utc => 0,
            Zone::Rule(rule) => rule_offset(rule, sec).unwrap_or(0),
            Zone::File(tz) => {
                let tz = tz.as_ref();
                let types = tz.local_time_types();
                let trans = tz.transitions();
                let type_at = |i: usize| types.get(i).map_or(0, LocalTimeType::ut_offset);
                match (trans.first(), trans.last()) {
                    (Some(first), Some(last)) if sec >= first.unix_leap_time() => {
                        let last_type = type_at(last.local_time_type_index());
                        if sec >= last.unix_leap_time() {
                            return tz
                                .extra_rule()
                                .as_ref()
                                .and_then(|r| rule_offset(r, sec))
                                .unwrap_or(last_type);
                        }
                        let i = trans.partition_point(|t| t.unix_leap_time() <= sec);
                        type_at(trans[i - 1].local_time_type_index())
                    }
                    // Before the first transition, or none: the first
                    // standard-time type (or the first type).
                    _ => types
                        .iter()
                        .find(|t| !t.is_dst())
                        .or(types.first())
                        .map_or(0, LocalTimeType::ut_offset),
                }
            }
        }
    }

    /// Appends `sec` as `%FT%T%z`; `None` where glibc's `localtime_r` fails
    /// (the year does not fit a C `int`).
    pub fn format(&mut self, out: &mut Vec<u8>, sec: i64) -> Option<()> {
        if let Some((s, text)) = &self.last {
            if *s == sec {
                out.extend_from_slice(text);
                return Some(());
            }
        }
        let offset = self.offset(sec);
        let mut text = Vec::with_capacity(24);
        format_civil(&mut text, i128::from(sec) + i128::from(offset), offset)?;
        out.extend_from_slice(&text);
        self.last = Some((sec, text));
        Some(())
    }
}

/// The offset a POSIX rule gives at `sec`, as glibc's `__tz_compute`
/// computes it; `None` when the UTC year does not fit a C `int`.
fn rule_offset(rule: &TransitionRule, sec: i64) -> Option<i32> {
    let alt = match rule {
        TransitionRule::Fixed(t) => return Some(t.ut_offset()),
        TransitionRule::Alternate(alt) => alt,
    };
    // glibc takes the UTC `tm_year` (which must fit an int) and passes
    // `1900 + tm_year` on in int arithmetic, wrapping.
    let tm_year = i32::try_from(civil_year(i128::from(sec)) - 1900).ok()?;
    let year = tm_year.wrapping_add(1900);
    let (start, end) = dst_changes(alt, year);
    let dst = if start > end {
        sec < end || sec >= start
    } else {
        sec >= start && sec < end
    };
    Some(if dst {
        alt.dst().ut_offset()
    } else {
        alt.std().ut_offset()
    })
}

/// glibc's `compute_change` for the DST start and end of `year`, with its C
/// `int` arithmetic (wrapping) and its `year <= 1970` shortcut kept.
fn dst_changes(alt: &AlternateTime, year: i32) -> (i64, i64) {
    const DAY: i64 = 86_400;
    let change = |day: &RuleDay, secs: i32, offset: i32| -> i64 {
        let mut t: i64 = if year > 1970 {
            let days = (year.wrapping_sub(1970))
                .wrapping_mul(365)
                .wrapping_add((year - 1) / 4 - 1970 / 4)
                .wrapping_sub((year - 1) / 100 - 1970 / 100)
                .wrapping_add((year - 1) / 400 - 1970 / 400);
            i64::from(days) * DAY
        } else {
            0
        };
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
        match day {
            RuleDay::Julian0WithLeap(d) => t += i64::from(d.get()) * DAY,
            RuleDay::Julian1WithoutLeap(d) => {
                t += (i64::from(d.get()) - 1) * DAY;
                if d.get() >= 60 && leap {
                    t += DAY;
                }
            }
            RuleDay::MonthWeekDay(mwd) => {
                const MON_YDAY: [[i32; 13]; 2] = [
                    [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334, 365],
                    [0, 31, 60, 91, 121, 152, 182, 213, 244, 274, 305, 335, 366],
                ];
                let m = i32::from(mwd.month());
                let table = &MON_YDAY[usize::from(leap)];
                let before = table[m as usize - 1];
                let in_month = table[m as usize] - before;
                t += i64::from(before) * DAY;
                // Zeller's congruence for the weekday of the month's first day.
                let m1 = (m + 9) % 12 + 1;
                let yy0 = if m <= 2 { year.wrapping_sub(1) } else { year };
                let (yy1, yy2) = (yy0 / 100, yy0 % 100);
                let mut dow = ((26 * m1 - 2) / 10 + 1 + yy2 + yy2 / 4 + yy1 / 4 - 2 * yy1) % 7;
                if dow < 0 {
                    dow += 7;
                }
                let mut d = i32::from(mwd.week_day()) - dow;
                if d < 0 {
                    d += 7;
                }
                for _ in 1..mwd.week() {
                    if d + 7 >= in_month {
                        break;
                    }
                    d += 7;
                }
                t += i64::from(d) * DAY;
            }
        }
        t - i64::from(offset) + i64::from(secs)
    };
    (
        change(alt.dst_start(), alt.dst_start_time(), alt.std().ut_offset()),
        change(alt.dst_end(), alt.dst_end_time(), alt.dst().ut_offset()),
    )
}

/// Days since the epoch to (year, month, day), proleptic Gregorian, after
/// H. Hinnant's algorithm.
fn civil_from_days(days: i128) -> (i128, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i128::from(month <= 2), month, day)
}

fn civil_year(sec: i128) -> i128 {
    civil_from_days(sec.div_euclid(86_400)).0
}

/// Writes local seconds `local` with UTC offset `offset` (seconds) as glibc
/// `strftime("%FT%T%z")` does.
fn format_civil(out: &mut Vec<u8>, local: i128, offset: i32) -> Option<()> {
    let secs = local.rem_euclid(86_400) as u32;
    let (year, month, day) = civil_from_days(local.div_euclid(86_400));
    // glibc's localtime_r fails with EOVERFLOW when tm_year overflows int,
    // and strftime computes tm_year + 1900 in int arithmetic, which wraps.
    let tm_year = i32::try_from(year - 1900).ok()?;
    let shown = tm_year.wrapping_add(1900);

    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b.format(shown).as_bytes());
    let two = |out: &mut Vec<u8>, v: u32| {
        out.extend_from_slice(&[b'0' + (v / 10) as u8, b'0' + (v % 10) as u8])
    };
    out.push(b'-');
    two(out, month);
    out.push(b'-');
    two(out, day);
    out.push(b'T');
    two(out, secs / 3600);
    out.push(b':');
    two(out, secs / 60 % 60);
    out.push(b':');
    two(out, secs % 60);
    out.push(if offset < 0 { b'-' } else { b'+' });
    let minutes = offset.unsigned_abs() / 60;
    two(out, minutes / 60 % 100);
    two(out, minutes % 60);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn civil(local: i128, offset: i32) -> String {
        let mut v = Vec::new();
        format_civil(&mut v, local + i128::from(offset), offset).unwrap();
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn known_dates() {
        assert_eq!(civil(0, 0), "1970-01-01T00:00:00+0000");
        assert_eq!(civil(-1, 0), "1969-12-31T23:59:59+0000");
        assert_eq!(civil(951_782_400, 0), "2000-02-29T00:00:00+0000");
        assert_eq!(civil(1_656_878_358, -7 * 3600), "2022-07-03T12:59:18-0700");
        assert_eq!(civil(0, 19_800), "1970-01-01T05:30:00+0530");
        // Years below 1000 are not zero-padded by glibc.
        assert_eq!(civil(-31_556_908_800, 0), "970-01-01T00:00:00+0000");
    }

    #[test]
    fn years_beyond_c_int_fail_like_localtime_r() {
        let mut v = Vec::new();
        assert!(format_civil(&mut v, i128::from(i64::MAX), 0).is_none());
        assert!(format_civil(&mut v, i128::from(i64::MIN), 0).is_none());
    }
}
