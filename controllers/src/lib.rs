//! The controllers: endpoints, ReplicaSet, Deployment, DaemonSet, node lifecycle, namespaces and
//! garbage collection, each comparing desired with observed state through the API.
//!
//! A crate of its own (rather than one per controller) because the controllers share informers and
//! a work queue and run together as `skiff controllers`, as kube-controller-manager does.
//!
//! # Layout
//! Each controller's decisions are pure functions over k8s-openapi types, unit-tested without I/O:
//! - [`pods`]: readiness, availability, controller references, claims and the deletion ranking.
//! - [`endpoints`]: Endpoints and EndpointSlices of Services with a selector.
//! - [`replicaset`]: expectations, the create/delete diff and the ReplicaSet status.
//! - [`deployment`]: one rollout step (RollingUpdate, Recreate, revisions, cleanup, conditions).
//! - [`namespace`]: what a terminating namespace must lose before it is finalized.
//! - [`gc`]: owner references with background, foreground and orphan propagation.
//! - [`nodelifecycle`]: silent nodes, NoExecute taints and taint-based eviction.
//! - [`nodeipam`]: pod ranges for nodes.

pub mod deployment;
pub mod endpoints;
pub mod gc;
pub mod namespace;
pub mod nodeipam;
pub mod nodelifecycle;
pub mod pods;
pub mod replicaset;
