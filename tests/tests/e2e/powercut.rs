//! Power cuts of the whole API server: `skiff apiserver` runs with its data dir on a file system
//! that forgets everything not made durable (`skiff-powercut`, FUSE, needs root), HTTPS clients
//! create, update and delete ConfigMaps (some large enough for sled to keep apart from its log,
//! as blobs) and record each write the API acknowledged, and at a random moment the power goes:
//! the file system stops answering, the server is SIGKILLed, and what was never synced is dropped.
//! The server then starts again on what the "disk" kept, on the same data dir and port, and must
//! come back as the same cluster:
//! - its data dir there at all: the harness makes it with a plain `mkdir -p`, as a provisioning
//!   script would, and nothing but the server syncs the directories that name it;
//! - its own files (the cluster CA and every key and token under the data dir) unchanged, so the
//!   clients and agents it had still trust it and are still trusted: the admin token from before
//!   the cut authenticates, over a client trusting only the CA from before the cut;
//! - every acknowledged write there: a ConfigMap holds its last acknowledged data at its
//!   acknowledged resourceVersion (or is gone after an acknowledged delete), unless a later write
//!   to it went unanswered (its outcome unknown: either state is right);
//! - the log not gone back: resourceVersions handed out after the restart are above every one
//!   acknowledged before it.
//!
//! Several rounds on the same data dir. Where FUSE cannot be mounted the test says so on stderr
//! and checks nothing, as the store's power-cut test does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rand::Rng;
use serde_json::{Value, json};
use skiff_powercut::PowerCut;
use skiff_tests::{TestCluster, install_crypto};

const NAMESPACE: &str = "powercut";
const WRITERS: usize = 8;
/// Names each writer writes, each by that writer alone (so one client's order is the order).
const NAMES: u64 = 16;
const ROUNDS: u32 = 4;
/// Every so many writes one is large: over sled's ~128 KiB blob threshold.
const LARGE_EVERY: u64 = 8;
const LARGE: usize = 150 << 10;

/// One ConfigMap's data as the test writes it: a tag, and for a large write a blob of
/// incompressible text derived from the tag (sled compresses, and a repeated string would stay
/// small).
fn data_for(tag: &str, large: bool) -> Value {
    if !large {
        return json!({ "tag": tag });
    }
    let mut x = tag.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let blob: String = (0..LARGE)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'a' + (x % 26) as u8)
        })
        .collect();
    json!({ "tag": tag, "blob": blob })
}

/// A state of one ConfigMap: what it holds, at which resourceVersion; `None` is absent.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Held {
    rv: u64,
    tag: String,
    large: bool,
}

/// What the test knows of one name.
#[derive(Clone, Debug, Default)]
struct Known {
    /// The state the API last told: an acknowledged write, or what a read after a restart found.
    held: Option<Held>,
    /// Whether `held` is an acknowledged write (not a read).
    acknowledged: bool,
    /// A write sent after `held` that was never answered (the cut): what it would have left
    /// (`None` for a delete). Writers stop at their first unanswered write, so there is one.
    unanswered: Option<Option<(String, bool)>>,
}

/// What one writer did in one round.
#[derive(Default)]
struct Round {
    acknowledged: u64,
    large: u64,
    /// The lowest resourceVersion acknowledged in this round.
    lowest_rv: Option<u64>,
    highest_rv: u64,
}

/// The server's own files: every file under the data dir but the log (`db/`), by path.
fn own_files(data: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path == root.join("db") {
                continue;
            }
            if path.is_dir() {
                walk(&path, root, out);
            } else if let Ok(bytes) = std::fs::read(&path) {
                out.insert(path.strip_prefix(root).unwrap().to_path_buf(), bytes);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(data, data, &mut out);
    out
}

fn client(ca_pem: &[u8]) -> reqwest::Client {
    install_crypto();
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem).expect("CA PEM"))
        .build()
        .expect("HTTPS client")
}

/// The JSON body `request` is answered with, sent with `token` (the test's own reads and writes
/// after a restart, which must be answered).
async fn answer(request: reqwest::RequestBuilder, token: &str) -> Value {
    request
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn rv_of(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no resourceVersion in {object}"))
}

/// One writer's round: writes its names until `stop` or its first unanswered write, updating
/// `known` with what was acknowledged.
async fn write(
    http: reqwest::Client,
    base: String,
    token: String,
    writer: usize,
    round: u32,
    mut known: BTreeMap<String, Known>,
    stop: Arc<AtomicBool>,
) -> (BTreeMap<String, Known>, Round) {
    let url = format!("{base}/api/v1/namespaces/{NAMESPACE}/configmaps");
    let mut done = Round::default();
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let name = format!("w{writer}-{}", i % NAMES);
        let tag = format!("{round}.{writer}.{i}");
        let large = i % LARGE_EVERY == 3;
        let entry = known.entry(name.clone()).or_default();
        let exists = entry.held.is_some();
        let deleting = exists && i.is_multiple_of(11);
        let object = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "data": data_for(&tag, large),
        });
        let request = if deleting {
            http.delete(format!("{url}/{name}"))
        } else if exists {
            http.put(format!("{url}/{name}")).json(&object)
        } else {
            http.post(&url).json(&object)
        };
        let answer = match request
            .bearer_auth(&token)
            .timeout(Duration::from_secs(10))
            .send()
            .await
        {
            Ok(response) => {
                let code = response.status().as_u16();
                response.json::<Value>().await.ok().map(|body| (code, body))
            }
            Err(_) => None,
        };
        match answer {
            Some((200 | 201, body)) => {
                let rv = if deleting {
                    // The deleted object as it was last: the delete itself took a revision
                    // above it, which a delete's answer does not say.
                    0
                } else {
                    rv_of(&body)
                };
                assert!(
                    deleting || body["data"]["tag"] == tag.as_str(),
                    "a write of {name} answered with other data: {}",
                    body["data"]["tag"]
                );
                entry.held = (!deleting).then(|| Held {
                    rv,
                    tag: tag.clone(),
                    large,
                });
                entry.acknowledged = true;
                entry.unanswered = None;
                done.acknowledged += 1;
                done.large += u64::from(large && !deleting);
                if !deleting {
                    done.lowest_rv = Some(done.lowest_rv.map_or(rv, |l| l.min(rv)));
                    done.highest_rv = done.highest_rv.max(rv);
                }
            }
            // Refused before it was applied (too many requests, no room): try again.
            Some((429 | 507, _)) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Some((code, body)) if code < 500 => {
                panic!("a write of {name} answered {code}: {body}")
            }
            // No answer, or a server error: the write may or may not have happened. Only the
            // cut does this; the writer is done for the round.
            _ => {
                entry.unanswered = Some((!deleting).then_some((tag, large)));
                break;
            }
        }
    }
    (known, done)
}

/// After a restart: reads every name back, checks it against what was acknowledged, and makes
/// what it read the known state. Returns (acknowledged states found, unanswered writes found).
async fn verify(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    round: u32,
    known: &mut [BTreeMap<String, Known>],
) -> (u64, u64) {
    let url = format!("{base}/api/v1/namespaces/{NAMESPACE}/configmaps");
    let (mut found, mut took) = (0, 0);
    let mut lost = Vec::new();
    for names in known.iter_mut() {
        for (name, k) in names.iter_mut() {
            let response = http
                .get(format!("{url}/{name}"))
                .bearer_auth(token)
                .timeout(Duration::from_secs(10))
                .send()
                .await
                .unwrap_or_else(|e| panic!("round {round}: reading {name}: {e}"));
            let code = response.status().as_u16();
            let body: Value = response.json().await.unwrap_or_default();
            let now = match code {
                200 => {
                    let tag = body["data"]["tag"].as_str().unwrap_or_default().to_string();
                    let large = body["data"].get("blob").is_some();
                    if body["data"] != data_for(&tag, large) {
                        lost.push(format!("{name}: data of {tag} corrupted"));
                    }
                    Some(Held {
                        rv: rv_of(&body),
                        tag,
                        large,
                    })
                }
                404 => None,
                401 => panic!(
                    "round {round}: the admin token from before the cut no longer \
                     authenticates: {body}"
                ),
                code => panic!("round {round}: reading {name} answered {code}: {body}"),
            };
            let as_held = now == k.held;
            let as_unanswered = match (&k.unanswered, &now) {
                (Some(None), None) => true,
                (Some(Some((tag, large))), Some(held)) => {
                    held.tag == *tag
                        && held.large == *large
                        && k.held.as_ref().is_none_or(|h| held.rv > h.rv)
                }
                _ => false,
            };
            if as_held {
                found += u64::from(k.acknowledged);
            } else if as_unanswered {
                took += 1;
            } else {
                let then = match &k.unanswered {
                    Some(write) => format!(", then unanswered {write:?}"),
                    None => String::new(),
                };
                let told = if k.acknowledged {
                    "acknowledged"
                } else {
                    "read after the last restart"
                };
                lost.push(format!("{name}: {told} {:?}{then}, found {now:?}", k.held));
            }
            *k = Known {
                held: now,
                acknowledged: false,
                unanswered: None,
            };
        }
    }
    assert!(
        lost.is_empty(),
        "round {round}: {} acknowledged writes lost after the power cut, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    (found, took)
}

#[test]
fn a_power_cut_of_the_api_server_loses_nothing_acknowledged() {
    let Some(disk) = PowerCut::mount() else {
        eprintln!(
            "SKIPPED: cannot mount a FUSE file system here (needs root and /dev/fuse); the \
             API server's power-cut test checked nothing"
        );
        return;
    };
    let data = disk.path().join("data");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut rng = rand::rng();

    // The FUSE file system's free space says nothing of the machine's: no reserve.
    let mut server = TestCluster::start_on("apiserver", &data, &["--disk-reserve", "0"]);
    let files = own_files(&data);
    let ca_pem = files
        .get(Path::new("pki/ca.crt"))
        .expect("the CA file")
        .clone();
    let token = server.token.clone();
    let base = server.server.clone();
    rt.block_on(async {
        let created = client(&ca_pem)
            .post(format!("{base}/api/v1/namespaces"))
            .bearer_auth(&token)
            .json(
                &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(created.status().as_u16(), 201, "creating the namespace");
    });

    let mut known: Vec<BTreeMap<String, Known>> = vec![BTreeMap::new(); WRITERS];
    let (mut acknowledged, mut large, mut found, mut took) = (0, 0, 0, 0);
    // The highest resourceVersion acknowledged before this round.
    let mut floor = 0u64;
    for round in 0..ROUNDS {
        let http = client(&ca_pem);
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = std::mem::take(&mut known)
            .into_iter()
            .enumerate()
            .map(|(w, names)| {
                rt.spawn(write(
                    http.clone(),
                    base.clone(),
                    token.clone(),
                    w,
                    round,
                    names,
                    stop.clone(),
                ))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(rng.random_range(300..1500)));
        // The power goes: nothing reaches the disk from here on.
        disk.freeze();
        stop.store(true, Ordering::Relaxed);
        server.kill();
        disk.restore_power();
        let mut highest = floor;
        for w in writers {
            let (names, done) = rt.block_on(w).expect("a writer panicked");
            known.push(names);
            acknowledged += done.acknowledged;
            large += done.large;
            if let Some(lowest) = done.lowest_rv {
                assert!(
                    lowest > floor,
                    "round {round}: resourceVersion {lowest} acknowledged after the restart, \
                     not above {floor} acknowledged before it: the log went back"
                );
            }
            highest = highest.max(done.highest_rv);
        }
        floor = highest;

        // The power is back: the same server on the same data dir and port.
        server.restart_after_crash();
        let now = own_files(&data);
        let changed: Vec<String> = files
            .iter()
            .filter_map(|(path, before)| match now.get(path) {
                Some(after) if after == before => None,
                Some(_) => Some(format!("{} changed", path.display())),
                None => Some(format!("{} lost", path.display())),
            })
            .collect();
        assert!(
            changed.is_empty(),
            "round {round}: the server's own files did not survive the power cut (a new CA, \
             key or token breaks every client and agent): {}",
            changed.join(", ")
        );
        let http = client(&ca_pem);
        let (f, t) = rt.block_on(verify(&http, &base, &token, round, &mut known));
        found += f;
        took += t;
        let list = rt.block_on(answer(
            http.get(format!(
                "{base}/api/v1/namespaces/{NAMESPACE}/configmaps?limit=1"
            )),
            &token,
        ));
        let list_rv = rv_of(&list);
        assert!(
            list_rv >= floor,
            "round {round}: the log ends at {list_rv} after the restart, below the acknowledged \
             {floor}"
        );
        // A write after the restart goes above every acknowledged one.
        let marker = rt.block_on(answer(
            http.post(format!("{base}/api/v1/namespaces/{NAMESPACE}/configmaps"))
                .json(&json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("after-cut-{round}"), "namespace": NAMESPACE},
                })),
            &token,
        ));
        let marker_rv = rv_of(&marker);
        assert!(
            marker_rv > floor,
            "round {round}: a write after the restart got resourceVersion {marker_rv}, not above \
             the acknowledged {floor}: the log went back"
        );
    }
    let stats = disk.stats();
    eprintln!(
        "API server power cuts: {ROUNDS}; writes acknowledged: {acknowledged} ({large} large); \
         last acknowledged states found: {found}, unanswered writes found applied: {took}; \
         CA, keys and tokens unchanged; file syncs {}, directory syncs {}; {} bytes written, \
         {} unsynced bytes dropped by the cuts",
        stats.file_syncs, stats.dir_syncs, stats.written, stats.lost
    );
    assert!(acknowledged > 200, "too few writes: {acknowledged}");
    assert!(large > 0, "no large write acknowledged");
    assert!(
        stats.lost > 0,
        "no cut dropped anything: the test tested nothing"
    );
}
