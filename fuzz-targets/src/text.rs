//! Parsers of short strings from query parameters and object fields: label and field
//! selectors, quantities, `continue` tokens, `resourceVersion`, points in history, CronJob
//! schedules. Each checks a round trip: what parses prints as something that parses the same.

use jiff::Timestamp;
use jiff::tz::TimeZone;
use skiff_meta::{fields, labels, paging, quantity, schedule};

use crate::point::Point;
use crate::utf8;

/// `labelSelector=`: what parses prints as a selector that parses equal, and matching a set of
/// labels neither panics nor depends on the round trip.
pub fn label_selector(data: &[u8]) {
    let Some(text) = utf8(data) else { return };
    let Ok(selector) = labels::parse(text) else {
        return;
    };
    let printed = selector.to_string();
    let again = labels::parse(&printed)
        .unwrap_or_else(|e| panic!("{text:?} prints as {printed:?}, which does not parse: {e}"));
    assert_eq!(again, selector, "{text:?} printed as {printed:?}");
    let labels = sample_labels(&selector);
    assert_eq!(selector.matches(&labels), again.matches(&labels));
    for r in selector.requirements() {
        let _ = selector.requires_exact_match(r.key());
    }
}

/// Labels with every key the selector names, set to its first value (or an empty one).
fn sample_labels(selector: &labels::Selector) -> std::collections::BTreeMap<String, String> {
    selector
        .requirements()
        .iter()
        .map(|r| {
            let value = r.values().first().cloned().unwrap_or_default();
            (r.key().to_string(), value)
        })
        .collect()
}

/// `fieldSelector=`: the round trip, and the check against a resource's selectable fields.
pub fn field_selector(data: &[u8]) {
    let Some(text) = utf8(data) else { return };
    let Ok(selector) = fields::parse(text) else {
        return;
    };
    let printed = selector.to_string();
    let again = fields::parse(&printed)
        .unwrap_or_else(|e| panic!("{text:?} prints as {printed:?}, which does not parse: {e}"));
    // The same terms; their order may differ, as in Kubernetes: terms are sorted as written
    // (`a==x` before `a=w`) and print with `=`.
    let terms = |s: &fields::Selector| {
        let mut terms: Vec<String> = s.requirements().iter().map(ToString::to_string).collect();
        terms.sort();
        terms
    };
    assert_eq!(
        terms(&again),
        terms(&selector),
        "{text:?} printed as {printed:?}"
    );
    assert_eq!(
        again.to_string(),
        fields::parse(&again.to_string()).unwrap().to_string()
    );
    let pods = skiff_kinds::builtin::by_plural("pods");
    let pod = serde_json::json!({
        "metadata": {"name": "a", "namespace": "default"},
        "spec": {"nodeName": "n1", "restartPolicy": "Always"},
        "status": {"phase": "Running", "podIP": "10.0.0.1"},
    });
    if selector.validate(pods.info()).is_ok() {
        let _ = selector.matches(pods.info(), &pod);
    }
    for r in selector.requirements() {
        let escaped = fields::escape_value(&r.value);
        assert_eq!(
            fields::unescape_value(&escaped).as_deref(),
            Ok(r.value.as_str()),
            "escaping {:?}",
            r.value
        );
    }
}

/// A `resource.Quantity`: the canonical form parses back to the same amount and prints the same
/// again; the integer views do not panic.
pub fn quantity(data: &[u8]) {
    let Some(text) = utf8(data) else { return };
    let Ok(q) = quantity::parse(text) else {
        if quantity::parse(text.trim()).is_err() {
            assert_eq!(quantity::milli_value(text), None, "{text:?}");
        }
        return;
    };
    let printed = q.to_string();
    let again = quantity::parse(&printed)
        .unwrap_or_else(|e| panic!("{text:?} prints as {printed:?}, which does not parse: {e}"));
    assert_eq!(again, q, "{text:?} printed as {printed:?}");
    assert_eq!(
        again.to_string(),
        printed,
        "{text:?}: the canonical form is not stable"
    );
    let _ = (q.value(), q.milli_value(), q.is_integer());
    let _ = (q.add(&again), q.sub(&again));
    let _ = (quantity::value(text), quantity::milli_value(text));
}

/// A `continue` token: one that decodes encodes to a token that decodes the same.
pub fn continue_token(data: &[u8]) {
    let Some(text) = utf8(data) else { return };
    for prefix in ["", "/registry/"] {
        let Some(token) = paging::decode_continue(text, prefix) else {
            continue;
        };
        assert_ne!(token.revision, 0);
        assert!(token.start.starts_with(prefix));
        let again =
            paging::encode_continue(token.revision, token.start.as_bytes(), token.remaining);
        assert_eq!(paging::decode_continue(&again, prefix), Some(token));
    }
}

/// A `resourceVersion` parameter (and the `metadata.resourceVersion` of a body, read the same
/// way): a revision that parses prints as the same number.
pub fn resource_version(data: &[u8]) {
    let Some(text) = utf8(data) else { return };
    match paging::parse_resource_version(Some(text)) {
        Ok(Some(rv)) => {
            assert_ne!(rv, 0);
            assert_eq!(
                paging::parse_resource_version(Some(&rv.to_string())),
                Ok(Some(rv))
            );
        }
        Ok(None) => assert!(text.is_empty() || text.parse::<u64>() == Ok(0), "{text:?}"),
        Err(e) => assert!(e.contains("invalid resource version"), "{e}"),
    }
}

/// A point in history (`skiff replay --at`, the timeline's `?at=`): revisions and times print
/// as what parses to them; relative points resolve against any clock without panicking.
pub fn time_point(data: &[u8]) {
    let Some(text) = utf8(data) else { return };
    let Ok(point) = text.parse::<Point>() else {
        return;
    };
    let _ = point.to_string();
    let again = match point {
        Point::Now => "now".to_string(),
        Point::Revision(r) => r.0.to_string(),
        Point::Time(t) => t.to_string(),
        Point::Ago(d) => {
            let d = jiff::SignedDuration::try_from(d).expect("a relative point came from one");
            format!("-{d}")
        }
    };
    assert_eq!(again.parse::<Point>(), Ok(point), "{text:?} as {again:?}");
    for now in [
        std::time::SystemTime::UNIX_EPOCH,
        std::time::SystemTime::now(),
    ] {
        let _ = point.time(now);
    }
}

/// A CronJob's `schedule` and `timeZone`: the next run after a time is strictly after it.
pub fn cron_schedule(data: &[u8]) {
    let Some(text) = utf8(data) else { return };
    let (spec, zone) = text.split_once('\n').unwrap_or((text, ""));
    let zone = schedule::time_zone((!zone.is_empty()).then_some(zone)).unwrap_or(TimeZone::UTC);
    let Ok(schedule) = schedule::Schedule::parse(spec) else {
        return;
    };
    for after in [
        Timestamp::UNIX_EPOCH,
        Timestamp::from_second(1_798_761_600).expect("2027-01-01"),
        Timestamp::MAX,
    ] {
        if let Some(next) = schedule.next_after(after, &zone) {
            assert!(
                next > after,
                "{spec:?} in {zone:?}: {next} is not after {after}"
            );
        }
    }
}
