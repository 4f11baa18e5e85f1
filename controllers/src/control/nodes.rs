//! The node controllers: IPAM hands each node a pod range; lifecycle watches Leases and node
//! status, marks silent nodes Unknown, keeps the NoExecute taints in step with the Ready
//! condition, marks their pods not ready, and evicts pods whose toleration ran out.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use skiff_client::{
    Api, Informer, ListOptions, SharedInformerFactory, WorkQueue, handler_fn, index, key_of,
};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Started, not_found, queue, spawn_workers};
use crate::nodeipam::Allocator;
use crate::nodelifecycle as logic;
use crate::{Error, Options, Result, pods};

/// The namespace of node Leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

fn pod_cidr(node: &Node) -> Option<String> {
    node.spec
        .as_ref()?
        .pod_cidr
        .clone()
        .filter(|c| !c.is_empty())
}

struct Ipam {
    nodes: Informer<Node>,
    queue: WorkQueue<String>,
    client: skiff_client::Client,
    // Short critical sections only; never held across an await.
    allocator: Mutex<Allocator>,
}

impl Ipam {
    async fn sync(&self, name: &str) -> Result<Option<Duration>> {
        let Some(node) = self.nodes.cache().get(None, name) else {
            return Ok(None);
        };
        if pod_cidr(&node).is_some() {
            return Ok(None);
        }
        let cidr = {
            let mut a = self.allocator.lock().expect("allocator lock");
            // Every range the cache shows taken (also those handed out before a restart).
            for n in self.nodes.cache().list() {
                if let Some(c) = pod_cidr(&n) {
                    a.occupy(&c);
                }
            }
            a.allocate()?
        };
        let api: Api<Node> = Api::all(self.client.clone());
        let patch = json!({"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}});
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(None),
            Err(e) => {
                self.allocator
                    .lock()
                    .expect("allocator lock")
                    .release(&cidr);
                if not_found(&e) {
                    Ok(None)
                } else {
                    Err(Error::api(format!("setting the pod range of node {name}"))(
                        e,
                    ))
                }
            }
        }
    }
}

/// Registers node IPAM on `factory`. One worker: allocation must not race itself.
pub(crate) fn start_ipam(factory: &SharedInformerFactory, options: &Options) -> Result<Started> {
    let c = Arc::new(Ipam {
        nodes: factory.informer::<Node>(),
        queue: queue(),
        client: factory.client().clone(),
        allocator: Mutex::new(Allocator::new(
            &options.cluster_cidr,
            options.node_cidr_mask_size,
        )?),
    });
    let (a, u, d) = (c.clone(), c.clone(), c.clone());
    c.nodes.add_handler(handler_fn(
        move |n: &Arc<Node>| {
            if pod_cidr(n).is_none() {
                a.queue.add(key_of(n.as_ref()))
            }
        },
        move |_: &Arc<Node>, n: &Arc<Node>| {
            if pod_cidr(n).is_none() {
                u.queue.add(key_of(n.as_ref()))
            }
        },
        move |n: &Arc<Node>| {
            if let Some(c) = pod_cidr(n) {
                d.allocator.lock().expect("allocator lock").release(&c);
            }
        },
    ));
    Ok(Started {
        queue: c.queue.clone(),
        start: Box::new(move |tracker: &TaskTracker| {
            let q = c.queue.clone();
            spawn_workers(tracker, "nodeipam", &q, 1, move |key: String| {
                let c = c.clone();
                async move { c.sync(&key).await }
            });
        }),
    })
}

struct Lifecycle {
    nodes: Informer<Node>,
    leases: Informer<Lease>,
    pods: Informer<Pod>,
    queue: WorkQueue<String>,
    client: skiff_client::Client,
    grace: Duration,
    period: Duration,
    /// When this controller started watching: no node counts as silent before a full grace
    /// period after it (see [`logic::silent_at`]).
    watching_since: Timestamp,
}

impl Lifecycle {
    async fn sync(&self, name: &str) -> Result<Option<Duration>> {
        let Some(node) = self.nodes.cache().get(None, name) else {
            return Ok(None);
        };
        let now = Timestamp::now();
        let lease = self.leases.cache().get(Some(LEASE_NAMESPACE), name);
        let node_api: Api<Node> = Api::all(self.client.clone());
        if let Some(conds) = logic::silent_conditions(
            &node,
            lease.as_deref(),
            self.grace,
            self.watching_since,
            now,
        ) {
            tracing::info!(
                node = name,
                "node stopped renewing its lease; marking it Unknown"
            );
            let patch = json!({"status": {"conditions": conds}});
            match node_api
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(e) if not_found(&e) => return Ok(None),
                Err(e) => return Err(Error::api(format!("marking node {name} Unknown"))(e)),
            }
            // The update event brings the taints and the pods.
            return Ok(None);
        }
        if let Some(taints) = logic::desired_taints(&node, now) {
            let patch = json!({"spec": {"taints": taints}});
            match node_api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(e) if not_found(&e) => return Ok(None),
                Err(e) => return Err(Error::api(format!("tainting node {name}"))(e)),
            }
            return Ok(None);
        }

        let mut next: Option<Timestamp> = None;
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        let mut unknown = logic::ready_status(&node) == Some("Unknown");
        if unknown {
            // The cache may be behind a kubelet that has just come back and reported its pods
            // Ready: marking them not ready from a stale node would stick, since the kubelet
            // reports a pod again only when its own view changes. Read the node as it is now.
            match node_api.get(name).await {
                Ok(current) => unknown = logic::ready_status(&current) == Some("Unknown"),
                Err(e) if not_found(&e) => return Ok(None),
                Err(e) => return Err(Error::api(format!("reading node {name}"))(e)),
            }
        }
        for pod in self.pods.cache().by_index(index::NODE_NAME, name) {
            if pods::is_terminal(&pod) || pods::is_deleting(&pod.metadata) {
                continue;
            }
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
            if let Some(at) = logic::eviction_at(&pod, &taints, now) {
                if at <= now {
                    tracing::info!(node = name, pod = %format!("{ns}/{pod_name}"), "evicting pod from a tainted node");
                    match api.delete(&pod_name, &DeleteParams::default()).await {
                        Ok(_) => {}
                        Err(e) if not_found(&e) => {}
                        Err(e) => {
                            return Err(Error::api(format!("evicting pod {ns}/{pod_name}"))(e));
                        }
                    }
                    continue;
                }
                next = Some(next.map_or(at, |n| n.min(at)));
            }
            if unknown && let Some(conds) = logic::pod_not_ready(&pod, now) {
                let patch = json!({"status": {"conditions": conds}});
                match api
                    .patch_status(&pod_name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => {}
                    Err(e) if not_found(&e) => {}
                    Err(e) => {
                        return Err(
                            Error::api(format!("marking pod {ns}/{pod_name} not ready"))(e),
                        );
                    }
                }
            }
        }
        // Look again when the node may have gone silent or a pod's toleration runs out.
        let mut after = self.period;
        if let Some(at) = logic::silent_at(&node, lease.as_deref(), self.grace, self.watching_since)
            && !unknown
            && at > now
        {
            after = after.min(Duration::from_millis(
                (at.as_millisecond() - now.as_millisecond()) as u64 + 1,
            ));
        }
        if let Some(at) = next {
            after = after.min(Duration::from_millis(
                (at.as_millisecond() - now.as_millisecond()).max(0) as u64 + 1,
            ));
        }
        Ok(Some(after))
    }
}

/// Registers node lifecycle on `factory`.
pub(crate) fn start_lifecycle(
    factory: &SharedInformerFactory,
    options: &Options,
    workers: usize,
    _shutdown: CancellationToken,
) -> Started {
    let pods = factory.informer::<Pod>();
    pods.add_index(index::NODE_NAME, index::pod_node_name);
    let c = Arc::new(Lifecycle {
        nodes: factory.informer::<Node>(),
        leases: factory.informer_with::<Lease>(ListOptions::default().namespace(LEASE_NAMESPACE)),
        pods,
        queue: queue(),
        client: factory.client().clone(),
        grace: options.node_monitor_grace_period,
        period: options.node_monitor_period,
        watching_since: Timestamp::now(),
    });
    let (a, u, d) = (c.clone(), c.clone(), c.clone());
    c.nodes.add_handler(handler_fn(
        move |n: &Arc<Node>| a.queue.add(key_of(n.as_ref())),
        move |_: &Arc<Node>, n: &Arc<Node>| u.queue.add(key_of(n.as_ref())),
        move |n: &Arc<Node>| d.queue.add(key_of(n.as_ref())),
    ));
    let (a, u) = (c.clone(), c.clone());
    c.leases.add_handler(handler_fn(
        move |l: &Arc<Lease>| a.queue.add(l.metadata.name.clone().unwrap_or_default()),
        move |_: &Arc<Lease>, l: &Arc<Lease>| {
            u.queue.add(l.metadata.name.clone().unwrap_or_default())
        },
        |_: &Arc<Lease>| {},
    ));
    Started {
        queue: c.queue.clone(),
        start: Box::new(move |tracker: &TaskTracker| {
            let q = c.queue.clone();
            spawn_workers(tracker, "nodelifecycle", &q, workers, move |key: String| {
                let c = c.clone();
                async move { c.sync(&key).await }
            });
        }),
    }
}
