//! The JSON text of Kubernetes' special types, as Go writes it: `meta/v1.Time` and `MicroTime`
//! (RFC 3339 in UTC) and `meta/v1.Duration` (Go's `time.Duration.String`).

/// Seconds from the Unix epoch to Go's zero `time.Time` (0001-01-01T00:00:00Z), which
/// `meta/v1.Time` writes as `null`.
pub(crate) const GO_ZERO_TIME_UNIX: i64 = -62_135_596_800;

/// `meta/v1.Time` as JSON text: `2024-01-02T03:04:05Z` (whole seconds, like Go's `time.RFC3339`),
/// or `None` outside the years 0000-9999, which RFC 3339 (and Go's `time.Time` JSON) cannot write.
pub(crate) fn rfc3339(seconds: i64) -> Option<String> {
    let (date, (h, m, s)) = civil(seconds)?;
    Some(format!("{date}T{h:02}:{m:02}:{s:02}Z"))
}

/// `meta/v1.MicroTime` as JSON text: `2024-01-02T03:04:05.123456Z`; `None` as for [`rfc3339`].
pub(crate) fn rfc3339_micro(seconds: i64, micros: u32) -> Option<String> {
    let (date, (h, m, s)) = civil(seconds)?;
    Some(format!("{date}T{h:02}:{m:02}:{s:02}.{micros:06}Z"))
}

/// The UTC calendar date (`YYYY-MM-DD`) and time of day of a Unix time in the years 0000-9999.
fn civil(seconds: i64) -> Option<(String, (i64, i64, i64))> {
    let days = seconds.div_euclid(86_400);
    let secs = seconds.rem_euclid(86_400);
    // Days to civil date in the proleptic Gregorian calendar (H. Hinnant's algorithm), in i128 so
    // that no i64 input overflows.
    let z = i128::from(days) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i128::from(month <= 2);
    if !(0..=9999).contains(&year) {
        return None;
    }
    let date = format!("{year:04}-{month:02}-{day:02}");
    Some((date, (secs / 3_600, secs / 60 % 60, secs % 60)))
}

/// Go's `time.Duration.String()` of a count of nanoseconds: `1h0m0s`, `1.5s`, `300ms`, `0s`.
pub(crate) fn go_duration(nanos: i64) -> String {
    let u = nanos.unsigned_abs();
    let sign = if nanos < 0 { "-" } else { "" };
    if u == 0 {
        return "0s".to_owned();
    }
    if u < 1_000_000_000 {
        let (prec, unit) = match u {
            0..1_000 => (0, "ns"),
            1_000..1_000_000 => (3, "µs"),
            _ => (6, "ms"),
        };
        let scale = 10u64.pow(prec);
        return format!("{sign}{}{}{unit}", u / scale, fraction(u % scale, prec));
    }
    let frac = fraction(u % 1_000_000_000, 9);
    let secs = u / 1_000_000_000;
    let (hours, minutes, s) = (secs / 3_600, secs / 60 % 60, secs % 60);
    if hours > 0 {
        format!("{sign}{hours}h{minutes}m{s}{frac}s")
    } else if minutes > 0 {
        format!("{sign}{minutes}m{s}{frac}s")
    } else {
        format!("{sign}{s}{frac}s")
    }
}

/// `.digits` of `value / 10^prec` without trailing zeros, or nothing when it is zero.
fn fraction(value: u64, prec: u32) -> String {
    if value == 0 {
        return String::new();
    }
    let digits = format!("{value:0width$}", width = prec as usize);
    format!(".{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_format_like_go_rfc3339() {
        let cases = [
            (0, "1970-01-01T00:00:00Z"),
            (1_704_164_645, "2024-01-02T03:04:05Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (-1, "1969-12-31T23:59:59Z"),
            (GO_ZERO_TIME_UNIX, "0001-01-01T00:00:00Z"),
            (-62_167_219_200, "0000-01-01T00:00:00Z"),
            (253_402_300_799, "9999-12-31T23:59:59Z"),
        ];
        for (seconds, want) in cases {
            assert_eq!(rfc3339(seconds).as_deref(), Some(want), "{seconds}");
        }
    }

    #[test]
    fn times_outside_years_0000_to_9999_are_refused() {
        for seconds in [253_402_300_800, -62_167_219_201, i64::MAX, i64::MIN] {
            assert_eq!(rfc3339(seconds), None, "{seconds}");
            assert_eq!(rfc3339_micro(seconds, 0), None, "{seconds}");
        }
    }

    #[test]
    fn micro_times_have_six_fraction_digits() {
        assert_eq!(
            rfc3339_micro(1_704_164_645, 7).as_deref(),
            Some("2024-01-02T03:04:05.000007Z")
        );
        assert_eq!(
            rfc3339_micro(0, 0).as_deref(),
            Some("1970-01-01T00:00:00.000000Z")
        );
    }

    #[test]
    fn durations_format_like_go() {
        let cases = [
            (0, "0s"),
            (1, "1ns"),
            (1_100, "1.1µs"),
            (2_200_000, "2.2ms"),
            (1_500_000_000, "1.5s"),
            (60_000_000_000, "1m0s"),
            (3_600_000_000_000, "1h0m0s"),
            (5_400_000_000_000, "1h30m0s"),
            (90_061_000_000_001, "25h1m1.000000001s"),
            (-1_500_000_000, "-1.5s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
            (i64::MAX, "2562047h47m16.854775807s"),
        ];
        for (nanos, want) in cases {
            assert_eq!(go_duration(nanos), want, "{nanos}ns");
        }
    }
}
