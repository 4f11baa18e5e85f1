//! List-and-watch inside the API server: for the loops that keep some of its own state current
//! with a kind's objects in the log (the definition controller, the authorizer's policy).
//!
//! A [`Follower`] sees one fresh list, then every change after it, in order; when the watch falls
//! behind compaction (410) it sees a fresh list again. A watch that ends or fails is re-opened from
//! the last revision seen, so nothing is skipped or seen twice. The loop holds the server only
//! weakly and ends when the server shuts down.

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use skiff_meta::ResourceInfo;
use skiff_store::Revision;

use crate::error::{Error, Result};
use crate::registry::WatchEvent;
use crate::server::ApiServer;

/// What a list-and-watch loop does with what it sees.
pub trait Follower: Send + Sync + 'static {
    /// Every object of the kind, at the start and whenever the watch had to start over.
    fn listed(&self, server: &Arc<ApiServer>, items: &[Value]) -> impl Future<Output = ()> + Send;

    /// One object created or changed (`present`) or deleted (as it was before).
    fn changed(
        &self,
        server: &Arc<ApiServer>,
        object: &Value,
        present: bool,
    ) -> impl Future<Output = ()> + Send;
}

/// Lists `info`'s objects into `follower` before returning, then follows them in a task until
/// the server shuts down. `what` names the loop in logs.
pub async fn start<F: Follower>(
    server: &Arc<ApiServer>,
    info: &'static ResourceInfo,
    what: &'static str,
    follower: F,
) -> Result<()> {
    let next = list(server, info, &follower).await?;
    let weak = Arc::downgrade(server);
    let shutdown = server.shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = follow(weak, info, what, follower, next) => {}
        }
    });
    Ok(())
}

/// One fresh list into `follower`; the revision to watch from.
async fn list<F: Follower>(
    server: &Arc<ApiServer>,
    info: &'static ResourceInfo,
    follower: &F,
) -> Result<Revision> {
    let page = server
        .registry
        .list(info, None, None, None, None, None)
        .await?;
    follower.listed(server, &page.items).await;
    Ok(page.revision.next())
}

async fn follow<F: Follower>(
    server: Weak<ApiServer>,
    info: &'static ResourceInfo,
    what: &'static str,
    follower: F,
    mut start: Revision,
) {
    loop {
        let Some(api) = server.upgrade() else { return };
        let stream = match api.registry.watch(info, None, start, None, None).await {
            Ok(stream) => stream,
            Err(e) => {
                tracing::warn!(error = %e, resource = info.plural, "{what} cannot watch");
                drop(api);
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        drop(api);
        tokio::pin!(stream);
        while let Some(event) = stream.next().await {
            let Some(api) = server.upgrade() else { return };
            match event {
                Ok(event) => {
                    start = event.revision().map_or(start, Revision::next);
                    match &event {
                        WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                            follower.changed(&api, o, true).await;
                        }
                        WatchEvent::Deleted(o) => follower.changed(&api, o, false).await,
                        WatchEvent::Progress(_) => {}
                    }
                }
                Err(Error::Gone(_)) => {
                    // Compacted past where this watch was: start over from a fresh list.
                    match list(&api, info, &follower).await {
                        Ok(next) => start = next,
                        Err(e) => {
                            tracing::warn!(error = %e, resource = info.plural, "{what} cannot list");
                        }
                    }
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, resource = info.plural, "{what}'s watch failed");
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
