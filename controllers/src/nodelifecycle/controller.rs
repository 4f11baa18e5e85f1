//! The node lifecycle controller's shell: watches Leases and node status, marks silent nodes
//! Unknown, keeps the NoExecute taints in step with the Ready condition, marks their pods not
//! ready, and evicts pods whose toleration ran out.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use skiff_client::{Api, Informer, ListOptions, index};

use super as logic;
use crate::manager::Context;
use crate::runtime::{Action, Controller, Event, Reconcile, Started, not_found};
use crate::{Error, Result, pods};

/// The namespace of node Leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

/// Registers node lifecycle on the shared informers.
pub(crate) fn start(ctx: &Context) -> Result<Started> {
    let pods = ctx.factory.informer::<Pod>();
    pods.add_index(index::NODE_NAME, index::pod_node_name);
    let nodes = ctx.factory.informer::<Node>();
    let leases = ctx
        .factory
        .informer_with::<Lease>(ListOptions::default().namespace(LEASE_NAMESPACE));
    // Keys are node names; a Lease is named after its node.
    let controller = Controller::new("nodelifecycle", ctx.workers)
        .primary(&nodes)
        .watches(&leases, |e: Event<'_, Lease>| match e {
            Event::Deleted(_) => Vec::new(),
            e => vec![e.object().metadata.name.clone().unwrap_or_default()],
        });
    Ok(controller.run(Arc::new(Lifecycle {
        nodes,
        leases,
        pods,
        client: ctx.factory.client().clone(),
        grace: ctx.options.node_monitor_grace_period,
        period: ctx.options.node_monitor_period,
        watching_since: Timestamp::now(),
    })))
}

struct Lifecycle {
    nodes: Informer<Node>,
    leases: Informer<Lease>,
    pods: Informer<Pod>,
    client: skiff_client::Client,
    grace: Duration,
    period: Duration,
    /// When this controller started watching: no node counts as silent before a full grace
    /// period after it (see [`logic::silent_at`]).
    watching_since: Timestamp,
}

impl Reconcile for Lifecycle {
    async fn reconcile(&self, name: &str) -> Result<Action> {
        let Some(node) = self.nodes.cache().get(None, name) else {
            return Ok(Action::AwaitChange);
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
                Err(e) if not_found(&e) => return Ok(Action::AwaitChange),
                Err(e) => return Err(Error::api(format!("marking node {name} Unknown"))(e)),
            }
            // The update event brings the taints and the pods.
            return Ok(Action::AwaitChange);
        }
        if let Some(taints) = logic::desired_taints(&node, now) {
            let patch = json!({"spec": {"taints": taints}});
            match node_api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(e) if not_found(&e) => return Ok(Action::AwaitChange),
                Err(e) => return Err(Error::api(format!("tainting node {name}"))(e)),
            }
            return Ok(Action::AwaitChange);
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
                Err(e) if not_found(&e) => return Ok(Action::AwaitChange),
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
        Ok(Action::Requeue(after))
    }
}
