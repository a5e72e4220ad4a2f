//! HTTP dates (IMF-fixdate, RFC 9110 §5.6.7), written and parsed without
//! the crate the server uses, so the two cannot agree by sharing a bug.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Days since 1970-01-01 → (year, month 1..=12, day), Howard Hinnant's
/// `civil_from_days`.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

pub fn fmt_http_date(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).expect("after epoch").as_secs() as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} GMT",
        DAYS[days.rem_euclid(7) as usize],
        d,
        MONTHS[m as usize - 1],
        y,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Parses an IMF-fixdate; None if it is not exactly that format.
pub fn parse_http_date(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() != 29 || &s[3..5] != ", " || !s.ends_with(" GMT") {
        return None;
    }
    let day: u32 = s[5..7].parse().ok()?;
    let month = MONTHS.iter().position(|m| *m == &s[8..11])? as u32 + 1;
    let year: i64 = s[12..16].parse().ok()?;
    let h: i64 = s[17..19].parse().ok()?;
    let mi: i64 = s[20..22].parse().ok()?;
    let sec: i64 = s[23..25].parse().ok()?;
    let days = days_from_civil(year, month, day);
    if DAYS[days.rem_euclid(7) as usize] != &s[..3] {
        return None;
    }
    let total = days * 86_400 + h * 3600 + mi * 60 + sec;
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(total).ok()?))
}
