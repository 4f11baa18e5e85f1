//! The replay benchmark behind BENCHMARKS.md's `## Replay` section: builds a log of `REVISIONS`
//! revisions over `OBJECTS` live ConfigMaps (bulk-loaded with the store's importer, revisions and
//! times as a server would have written them), then times `get --at` (a list of every object at a
//! revision, and one object), `replay` (copying the log up to a point into a new data dir), and
//! export / import of the whole log.
//!
//! `cargo run --release -p skiff-api --example replay_bench -- [REVISIONS] [OBJECTS] [DIR]`

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use skiff_api::replay::{Point, Replay};
use skiff_store::archive;
use skiff_store::{Config, Event, EventKind, KeyValue, LogEntry, Revision, SledStore, Store};

fn config(path: std::path::PathBuf) -> Config {
    let mut config = Config::new(path);
    config.retention.max_revisions = None;
    config.retention.max_age = None;
    config
}

fn object(i: u64, generation: u64) -> Vec<u8> {
    format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"cm-{i:05}","namespace":"ns-{ns}","uid":"00000000-0000-0000-0000-{i:012}","creationTimestamp":"2026-01-01T00:00:00Z","labels":{{"app":"bench","shard":"{shard}"}},"managedFields":[{{"manager":"bench","operation":"Update","apiVersion":"v1","time":"2026-01-01T00:00:00Z","fieldsType":"FieldsV1","fieldsV1":{{"f:data":{{"f:value":{{}}}}}}}}]}},"data":{{"value":"{generation:020}","payload":"{pad}"}}}}"#,
        ns = i % 10,
        shard = i % 16,
        pad = "x".repeat(200),
    )
    .into_bytes()
}

fn key(i: u64) -> Vec<u8> {
    format!("/registry/core/configmaps/ns-{}/cm-{i:05}", i % 10).into_bytes()
}

fn rate(n: u64, d: Duration) -> String {
    format!("{:.0}", n as f64 / d.as_secs_f64())
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let revisions: u64 = args
        .next()
        .map_or(1_000_000, |a| a.parse().expect("REVISIONS"));
    let objects: u64 = args.next().map_or(10_000, |a| a.parse().expect("OBJECTS"));
    let dir = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("skiff-replay-bench"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    println!(
        "revisions {revisions}, live objects {objects}, dir {}",
        dir.display()
    );

    // The log: OBJECTS creates, then updates round-robin with a pseudo-random stride; one entry
    // per revision, 1 ms apart in commit time.
    let start_time = SystemTime::now() - Duration::from_millis(revisions + 10_000);
    let source = dir.join("source");
    let started = Instant::now();
    let mut importer = SledStore::importer(&source).unwrap();
    let mut versions = vec![0u64; objects as usize];
    let mut creates = vec![0u64; objects as usize];
    for rev in 1..=revisions {
        let i = if rev <= objects {
            rev - 1
        } else {
            (rev * 7919) % objects
        };
        let v = &mut versions[i as usize];
        *v += 1;
        if *v == 1 {
            creates[i as usize] = rev;
        }
        importer
            .entry(&LogEntry {
                revision: Revision(rev),
                time: start_time + Duration::from_millis(rev),
                tag: None,
                events: vec![Event {
                    kind: EventKind::Put,
                    kv: KeyValue {
                        key: key(i),
                        value: object(i, *v),
                        create_revision: Revision(creates[i as usize]),
                        mod_revision: Revision(rev),
                        version: *v,
                        lease: None,
                    },
                    prev_kv: None,
                }],
            })
            .unwrap();
    }
    importer.finish().unwrap();
    let built = started.elapsed();
    println!(
        "build (bulk load): {:.1} s, {} entries/s, {} MiB on disk",
        built.as_secs_f64(),
        rate(revisions, built),
        skiff_store::bench::dir_size(&source) >> 20
    );

    let t = Instant::now();
    let store = Arc::new(SledStore::open(config(source.clone())).unwrap());
    println!("first open: {:.1} s", t.elapsed().as_secs_f64());
    let shared: Arc<dyn Store> = store.clone();
    let replay = Replay::new(shared);
    let configmaps = replay.resolve_kind("cm").unwrap();

    // get --at: every object at a revision (cold, then warm), and one object.
    for at in [objects, revisions / 2, revisions] {
        for pass in ["cold", "warm"] {
            let t = Instant::now();
            let items = replay.list(configmaps, None, Revision(at)).await.unwrap();
            let d = t.elapsed();
            println!(
                "get --at {at} (all {} objects, {pass}): {:.0} ms",
                items.len(),
                d.as_secs_f64() * 1000.0
            );
        }
        let t = Instant::now();
        let n = 1000;
        for j in 0..n {
            let i = (j * 37) % objects;
            replay
                .get(
                    configmaps,
                    Some(&format!("ns-{}", i % 10)),
                    &format!("cm-{i:05}"),
                    Revision(at),
                )
                .await
                .unwrap()
                .expect("exists");
        }
        println!(
            "get --at {at} (one object): {:.0} µs each",
            t.elapsed().as_secs_f64() * 1e6 / n as f64
        );
    }
    let t = Instant::now();
    let time = start_time + Duration::from_millis(revisions / 3);
    let r = replay
        .resolve(&Point::Time(jiff::Timestamp::try_from(time).unwrap()))
        .await
        .unwrap();
    println!(
        "resolve a time to revision {r}: {:.2} ms",
        t.elapsed().as_secs_f64() * 1000.0
    );

    // replay up to the middle, and of everything.
    for until in [revisions / 2, revisions] {
        let into = dir.join(format!("replay-{until}"));
        let t = Instant::now();
        let summary = archive::copy(
            store.as_ref(),
            None,
            Some(Revision(until)),
            &into,
            &mut |_| {},
        )
        .await
        .unwrap();
        let d = t.elapsed();
        println!(
            "replay --until {until}: {:.1} s, {} entries/s",
            d.as_secs_f64(),
            rate(summary.entries, d)
        );
        let _ = std::fs::remove_dir_all(&into);
    }

    // export and import of the whole log.
    let file = dir.join("log.skiff");
    let t = Instant::now();
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&file).unwrap());
    let summary = archive::export(store.as_ref(), None, None, &mut out, &mut |_| {})
        .await
        .unwrap();
    drop(out);
    let d = t.elapsed();
    println!(
        "export: {:.1} s, {} entries/s, archive {} MiB",
        d.as_secs_f64(),
        rate(summary.entries, d),
        std::fs::metadata(&file).unwrap().len() >> 20
    );
    store.close().await.unwrap();
    let t = Instant::now();
    let mut input = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(&file).unwrap());
    let summary = archive::import(&mut input, &dir.join("imported"), &mut |_| {}).unwrap();
    let d = t.elapsed();
    println!(
        "import: {:.1} s, {} entries/s",
        d.as_secs_f64(),
        rate(summary.entries, d)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
