//! CronJob schedules: the standard five-field cron syntax Kubernetes accepts (its parser is
//! robfig/cron's `ParseStandard`), read by `croner`, and the next run after a time in the
//! CronJob's time zone.
//!
//! What is accepted, as Kubernetes accepts it: minute, hour, day of month, month, day of week,
//! with lists, ranges, steps (`*/5`, `1-10/2`, `5/15`), month and weekday names, `?` for "any";
//! a restricted day of month and a restricted day of week match either, as in Vixie cron; the
//! macros `@yearly` (`@annually`), `@monthly`, `@weekly`, `@daily` (`@midnight`), `@hourly`,
//! and `@every <duration>` (Go's duration syntax, `1h30m`). Seconds and years are refused, as the
//! standard parser refuses six fields. The API server validates with [`Schedule::parse`], the
//! CronJob controller plans with the same function, so what one accepts the other runs.

use std::str::FromStr;

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

/// A parsed CronJob schedule.
#[derive(Debug, Clone)]
pub struct Schedule(Kind);

#[derive(Debug, Clone)]
enum Kind {
    Cron(Box<Cron>),
    /// `@every`: a fixed delay from the previous run, whole seconds (at least one).
    Every(SignedDuration),
}

impl Schedule {
    /// Parses `text`; the error says why it does not parse (the API server's 422 carries it).
    pub fn parse(text: &str) -> Result<Schedule, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("empty spec string".into());
        }
        if let Some(rest) = text.strip_prefix("@every") {
            return every(rest.trim()).map(|d| Schedule(Kind::Every(d)));
        }
        let text = if text.eq_ignore_ascii_case("@midnight") {
            "@daily"
        } else {
            text
        };
        if !text.starts_with('@') {
            let fields = text.split_whitespace().count();
            if fields != 5 {
                return Err(format!(
                    "expected exactly 5 fields, found {fields}: [{}]",
                    text.split_whitespace().collect::<Vec<_>>().join(" ")
                ));
            }
            // An empty item of a list (`,`, `1,,2`): robfig/cron refuses it; croner would take
            // it as a field that matches nothing and search for ages for a run that never comes.
            if text
                .split_whitespace()
                .any(|field| field.split(',').any(str::is_empty))
            {
                return Err(
                    "failed to parse int from : strconv.Atoi: parsing \"\": invalid syntax".into(),
                );
            }
        }
        CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .sloppy_ranges(true)
            .build()
            .parse(text)
            .map(|cron| Schedule(Kind::Cron(Box::new(cron))))
            .map_err(|e| e.to_string())
    }

    /// The first run strictly after `after`, with the schedule read in `zone`; `None` when the
    /// schedule never fires again (`0 0 30 2 *`).
    pub fn next_after(&self, after: Timestamp, zone: &TimeZone) -> Option<Timestamp> {
        match &self.0 {
            Kind::Every(delay) => {
                let next = after.checked_add(*delay).ok()?;
                Timestamp::from_second(next.as_second()).ok()
            }
            Kind::Cron(cron) => {
                let zoned = after.to_zoned(zone.clone());
                cron.find_next_occurrence(&zoned, false)
                    .ok()
                    .map(|z| z.timestamp())
            }
        }
    }
}

impl FromStr for Schedule {
    type Err = String;

    fn from_str(s: &str) -> Result<Schedule, String> {
        Schedule::parse(s)
    }
}

/// The delay of `@every <duration>`, in Go's duration syntax, rounded down to whole seconds
/// (and up to one second at least, as robfig/cron does).
fn every(text: &str) -> Result<SignedDuration, String> {
    let delay = parse_go_duration(text)
        .ok_or_else(|| format!("failed to parse duration @every {text}: invalid duration"))?;
    if delay.is_negative() {
        return Err(format!("failed to parse duration @every {text}: negative"));
    }
    Ok(SignedDuration::from_secs(delay.as_secs().max(1)))
}

/// Go's `time.ParseDuration` syntax: a sequence of decimal numbers with units `ns`, `us`
/// (`µs`), `ms`, `s`, `m`, `h`, optionally signed (`1h30m`, `1.5h`, `300ms`).
fn parse_go_duration(text: &str) -> Option<SignedDuration> {
    let (negative, mut rest) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Some(SignedDuration::ZERO);
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        rest = &rest[unit_end..];
        total += number * nanos;
    }
    let nanos = if negative { -total } else { total };
    Some(SignedDuration::from_nanos(nanos as i64))
}

/// The time zone a CronJob names (`spec.timeZone`), or the process's own when it names none, as
/// kube-controller-manager reads schedules in its local time. The error is the one Kubernetes
/// gives (`unknown time zone X`).
pub fn time_zone(name: Option<&str>) -> Result<TimeZone, String> {
    match name {
        None => Ok(TimeZone::system()),
        Some(name) => TimeZone::get(name).map_err(|_| format!("unknown time zone {name}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn next(schedule: &str, after: &str) -> String {
        Schedule::parse(schedule)
            .unwrap()
            .next_after(at(after), &TimeZone::UTC)
            .unwrap()
            .to_string()
    }

    #[test]
    fn five_fields_with_lists_ranges_steps_and_names() {
        assert_eq!(
            next("*/15 * * * *", "2026-12-01T10:07:30Z"),
            "2026-12-01T10:15:00Z"
        );
        assert_eq!(
            next("0 9-17/4 * * MON-FRI", "2026-12-05T12:00:00Z"),
            "2026-12-07T09:00:00Z"
        );
        assert_eq!(
            next("30 2 1,15 JAN,jul *", "2026-12-01T00:00:00Z"),
            "2027-01-01T02:30:00Z"
        );
        // `a/n` is a-max/n (robfig/cron accepts it).
        assert_eq!(
            next("5/20 * * * *", "2026-12-01T10:26:00Z"),
            "2026-12-01T10:45:00Z"
        );
    }

    #[test]
    fn the_next_run_is_strictly_after() {
        assert_eq!(
            next("* * * * *", "2026-12-01T10:00:00Z"),
            "2026-12-01T10:01:00Z"
        );
    }

    #[test]
    fn a_restricted_day_of_month_or_week_matches_either() {
        // The 13th, or any Friday: Friday 2026-12-04 comes before the 13th.
        assert_eq!(
            next("0 0 13 * FRI", "2026-12-01T00:00:00Z"),
            "2026-12-04T00:00:00Z"
        );
        // With one of them `*`, only the other restricts.
        assert_eq!(
            next("0 0 13 * *", "2026-12-01T00:00:00Z"),
            "2026-12-13T00:00:00Z"
        );
    }

    #[test]
    fn macros() {
        let after = "2026-12-01T10:07:00Z";
        assert_eq!(next("@hourly", after), "2026-12-01T11:00:00Z");
        assert_eq!(next("@daily", after), "2026-12-02T00:00:00Z");
        assert_eq!(next("@midnight", after), "2026-12-02T00:00:00Z");
        assert_eq!(next("@weekly", after), "2026-12-06T00:00:00Z");
        assert_eq!(next("@monthly", after), "2027-01-01T00:00:00Z");
        assert_eq!(next("@yearly", after), "2027-01-01T00:00:00Z");
        assert_eq!(next("@annually", after), "2027-01-01T00:00:00Z");
        assert_eq!(next("@every 1h30m", after), "2026-12-01T11:37:00Z");
        assert_eq!(next("@every 90s", after), "2026-12-01T10:08:30Z");
    }

    #[test]
    fn a_time_zone_moves_the_wall_clock() {
        let berlin = time_zone(Some("Europe/Berlin")).unwrap();
        let schedule = Schedule::parse("0 9 * * *").unwrap();
        // 09:00 in Berlin in December is 08:00 UTC.
        assert_eq!(
            schedule
                .next_after(at("2026-12-01T00:00:00Z"), &berlin)
                .unwrap()
                .to_string(),
            "2026-12-01T08:00:00Z"
        );
        assert_eq!(
            time_zone(Some("Mars/Olympus")).unwrap_err(),
            "unknown time zone Mars/Olympus"
        );
    }

    #[test]
    fn what_does_not_parse_says_why() {
        for bad in [
            "",
            "foo",
            "* * * *",
            "0 * * * * *",
            "61 * * * *",
            "* 25 * * *",
            "* * 32 * *",
            "* * * 13 *",
            "* * * * 8",
            "@often",
            "@every soon",
        ] {
            let err = Schedule::parse(bad).unwrap_err();
            assert!(!err.is_empty(), "{bad:?}");
        }
        assert_eq!(
            Schedule::parse("foo").unwrap_err(),
            "expected exactly 5 fields, found 1: [foo]"
        );
    }

    #[test]
    fn a_schedule_that_never_fires_has_no_next_run() {
        let schedule = Schedule::parse("0 0 30 2 *").unwrap();
        assert_eq!(
            schedule.next_after(at("2026-12-01T00:00:00Z"), &TimeZone::UTC),
            None
        );
    }

    /// Found by the `cron_schedule` fuzz target: `, 7/2 * * MON-FRI` parsed (an empty minute
    /// list, which robfig/cron refuses) and the CronJob controller's next-run search then took
    /// 36 s of CPU per sync, finding nothing.
    #[test]
    fn regression_empty_list_items_are_refused() {
        for bad in [
            ", 7/2 * * MON-FRI",
            ", * * * *",
            "1,,2 * * * *",
            "* * * * MON,",
        ] {
            assert_eq!(
                Schedule::parse(bad).unwrap_err(),
                "failed to parse int from : strconv.Atoi: parsing \"\": invalid syntax",
                "{bad:?}"
            );
        }
        assert!(Schedule::parse("1,2 * * * MON,FRI").is_ok());
    }
}
