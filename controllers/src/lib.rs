//! The controllers: endpoints, ReplicaSet, Deployment, DaemonSet, node lifecycle, namespaces and
//! garbage collection, each comparing desired with observed state through the API.
//!
//! A crate of its own (rather than one per controller) because the controllers share informers and
//! a work queue and run together as `skiff controllers`, as kube-controller-manager does.
