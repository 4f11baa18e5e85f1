//! Points in the log's history as a user names them: a revision (`1234`), an RFC 3339 time
//! (`2026-11-30T12:00:00Z`), a time relative to now (`-15m`, `-1h30m`) or `now`.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use jiff::{SignedDuration, Timestamp};
use skiff_store::Revision;

/// A point in history, before it is resolved against a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// The newest revision.
    Now,
    /// A revision.
    Revision(Revision),
    /// A wall-clock time.
    Time(Timestamp),
    /// This long before now.
    Ago(Duration),
}

/// A point that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a point in history: use a revision (1234), an RFC 3339 time \
     (2026-01-02T15:04:05Z) or a time relative to now (-15m, -1h30m)"
)]
pub struct InvalidPoint(pub String);

impl FromStr for Point {
    type Err = InvalidPoint;

    fn from_str(text: &str) -> Result<Point, InvalidPoint> {
        let text = text.trim();
        let invalid = || InvalidPoint(text.to_string());
        if text.eq_ignore_ascii_case("now") {
            return Ok(Point::Now);
        }
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            return text
                .parse()
                .map(|r| Point::Revision(Revision(r)))
                .map_err(|_| invalid());
        }
        if let Some(rest) = text.strip_prefix('-') {
            let ago: SignedDuration = rest.parse().map_err(|_| invalid())?;
            return Duration::try_from(ago)
                .map(Point::Ago)
                .map_err(|_| invalid());
        }
        text.parse::<Timestamp>()
            .map(Point::Time)
            .map_err(|_| invalid())
    }
}

impl fmt::Display for Point {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Point::Now => f.write_str("now"),
            Point::Revision(r) => write!(f, "revision {r}"),
            Point::Time(t) => write!(f, "{t}"),
            Point::Ago(d) => write!(
                f,
                "{:#} ago",
                SignedDuration::try_from(*d).unwrap_or_default()
            ),
        }
    }
}

impl Point {
    /// The wall-clock time this point names, if it names one (relative to `now`).
    pub fn time(&self, now: SystemTime) -> Option<SystemTime> {
        match self {
            Point::Time(t) => Some(SystemTime::from(*t)),
            Point::Ago(d) => now.checked_sub(*d),
            Point::Now | Point::Revision(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions_times_and_relative_times_parse() {
        assert_eq!("1234".parse(), Ok(Point::Revision(Revision(1234))));
        assert_eq!("now".parse(), Ok(Point::Now));
        assert_eq!("-15m".parse(), Ok(Point::Ago(Duration::from_secs(900))));
        assert_eq!("-1h30m".parse(), Ok(Point::Ago(Duration::from_secs(5400))));
        let t: Timestamp = "2026-11-30T12:00:00Z".parse().unwrap();
        assert_eq!("2026-11-30T12:00:00Z".parse(), Ok(Point::Time(t)));
        assert_eq!(
            "2026-11-30T13:00:00+01:00".parse(),
            Ok(Point::Time(t)),
            "an offset is honoured"
        );
    }

    #[test]
    fn nonsense_is_refused_with_the_accepted_forms() {
        for bad in ["", "yesterday", "-", "--5m", "12a", "2026-13-01T00:00:00Z"] {
            let e = bad.parse::<Point>().unwrap_err();
            assert!(e.to_string().contains("-15m"), "{e}");
        }
    }

    #[test]
    fn relative_points_are_relative_to_now() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(10_000);
        assert_eq!(
            Point::Ago(Duration::from_secs(100)).time(now),
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(9_900))
        );
        assert_eq!(Point::Revision(Revision(3)).time(now), None);
    }
}
