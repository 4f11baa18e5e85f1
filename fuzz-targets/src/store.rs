//! What `skiff` reads back from disk: the records of a data dir (history records, log records,
//! their keys, meta values) and the export archive (`skiff import`). A damaged data dir or
//! archive must be an error, never a panic or a wrong read; what decodes must encode back to
//! the same.

use skiff_store::archive::{self, Item};
use skiff_store::fuzzing;

/// One record of a data dir. The first byte picks the decoder: 0 a history record, 1 a log
/// record (the next 8 bytes are its key's revision), 2 a history or log key, 3 a meta value.
pub fn record(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 4 {
        0 => hist(rest),
        1 => log(rest),
        2 => keys(rest),
        _ => assert_eq!(fuzzing::decode_u64(rest).is_ok(), rest.len() == 8),
    }
}

fn hist(bytes: &[u8]) {
    let Ok(record) = fuzzing::decode_hist(bytes) else {
        assert!(fuzzing::decode_hist_kv(Vec::new(), 1, bytes).is_err());
        return;
    };
    let tombstone = record.4.is_none();
    assert_eq!(fuzzing::hist_is_tombstone(bytes).ok(), Some(tombstone));
    let kv = fuzzing::decode_hist_kv(b"k".to_vec(), 7, bytes);
    match (&kv, &record.4) {
        (Ok(kv), Some(value)) => assert_eq!(&kv.value, value),
        (Err(_), None) => {}
        _ => panic!("decode and decode_kv disagree: {record:?} / {kv:?}"),
    }
    let again = fuzzing::encode_hist(&record);
    assert_eq!(fuzzing::decode_hist(&again).ok(), Some(record));
}

fn log(bytes: &[u8]) {
    let Some((rev, value)) = bytes.split_first_chunk::<8>() else {
        return;
    };
    let last = u64::from_be_bytes(*rev);
    let key = fuzzing::log_key(last);
    let Ok(entries) = fuzzing::decode_log(&key, value) else {
        return;
    };
    assert_eq!(
        entries.last().map(|e| e.0),
        Some(last),
        "a log record ends at its key"
    );
    assert!(entries.windows(2).all(|w| w[0].0 + 1 == w[1].0));
    let first = entries[0].0;
    let parts: Vec<_> = entries
        .iter()
        .map(|(_, t, tag, k)| (*t, tag.clone(), k.clone()))
        .collect();
    let again = fuzzing::encode_log(first, &parts);
    assert_eq!(fuzzing::decode_log(&key, &again).ok(), Some(entries));
}

fn keys(raw: &[u8]) {
    if let Some((key, rev)) = fuzzing::parse_hist_key(raw) {
        assert_eq!(
            fuzzing::hist_key(&key, rev),
            raw,
            "a history key prints back"
        );
    }
    if let Some(rev) = fuzzing::parse_log_key(raw) {
        assert_eq!(fuzzing::log_key(rev), raw, "a log key prints back");
    }
}

/// An export archive: one that reads writes back to the same bytes (up to its end), and its
/// summary counts what it holds.
pub fn archive(data: &[u8]) {
    let mut items = Vec::new();
    let mut input = data;
    let Ok(summary) = archive::read(
        &mut input,
        &mut |item| {
            items.push(item);
            Ok(())
        },
        &mut |_| {},
    ) else {
        return;
    };
    let count = |f: fn(&Item) -> bool| items.iter().filter(|i| f(i)).count() as u64;
    assert_eq!(summary.base, count(|i| matches!(i, Item::Base(..))));
    assert_eq!(summary.entries, count(|i| matches!(i, Item::Entry(..))));
    let span = summary.last.0 - summary.first.0 + 1;
    if summary.gaps {
        assert!(summary.entries >= 1 && summary.entries <= span);
        assert_eq!(items.first(), Some(&Item::Gaps));
    } else {
        assert_eq!(summary.entries, span);
    }
    let mut out = Vec::new();
    archive::write(&mut out, summary.first, summary.last, &items).expect("writing to a Vec");
    assert!(
        data.starts_with(&out),
        "the archive does not write back as it was read"
    );
}
