//! A watch a test keeps open while API servers are killed under it, resumed as an informer
//! resumes one: from the last resourceVersion it saw, at the next server in turn. The chaos soak
//! and the HA test check what it saw for gaps and repeats.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

/// Watches the collection at `path` (`/api/v1/namespaces/x/configmaps`) from resourceVersion
/// `from` until `stop` is set. Whenever a connection cannot be opened, is answered 5xx (a server
/// starting up, or one without its datastore) or ends, the watch goes on at the next of
/// `servers` from the last resourceVersion seen. Every event but bookmarks goes to `seen` with
/// its resourceVersion, type and object. A resume point refused with anything else, or an
/// `ERROR` event, fails the test. Returns how many times a watch that had been open was resumed.
pub(crate) async fn resumed_watch(
    http: &reqwest::Client,
    servers: &[String],
    token: &str,
    path: &str,
    stop: &AtomicBool,
    from: u64,
    mut seen: impl FnMut(u64, &str, &Value),
) -> u32 {
    let mut rv = from;
    let mut server = 0;
    let mut resumes = 0;
    while !stop.load(Ordering::Relaxed) {
        let url = format!(
            "{}{path}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true",
            servers[server]
        );
        let response = match http.get(&url).bearer_auth(token).send().await {
            Ok(r) if r.status().as_u16() < 500 => r,
            _ => {
                server = (server + 1) % servers.len();
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        assert_eq!(
            response.status().as_u16(),
            200,
            "watch from {rv} refused (a resume point must stay valid)"
        );
        let mut body = response.bytes_stream();
        let mut buffer = Vec::new();
        loop {
            let chunk = tokio::select! {
                chunk = body.next() => chunk,
                _ = tokio::time::sleep(Duration::from_millis(500)) => {
                    if stop.load(Ordering::Relaxed) { break } else { continue }
                }
            };
            let Some(Ok(chunk)) = chunk else { break };
            buffer.extend_from_slice(&chunk);
            while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                let event: Value = serde_json::from_slice(&line).expect("a watch event");
                let kind = event["type"].as_str().unwrap();
                assert_ne!(kind, "ERROR", "the watch failed: {event}");
                let object = &event["object"];
                let at: u64 = object["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                rv = at;
                if kind != "BOOKMARK" {
                    seen(at, kind, object);
                }
            }
        }
        // The connection ended: its server may be gone; go on at the next.
        server = (server + 1) % servers.len();
        resumes += 1;
    }
    resumes
}
