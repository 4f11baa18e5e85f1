//! The built-in ingress controller: serves the Ingresses of the IngressClasses whose
//! controller is [`CONTROLLER`] (the `skiff` class `skiff server` creates, marked default) on
//! the node's HTTP and HTTPS addresses.
//!
//! # Layout
//! - [`routes`]: Ingresses + Services + Endpoints + Secrets → the [`RouteTable`] (hosts,
//!   paths, backends, certificates) and the problems to report. Pure.
//! - [`tls`]: certificates by SNI from the table, a self-signed default.
//! - [`serve`]: the listeners and the reverse proxy; the table is swapped atomically and read
//!   per request.
//! - [`controller`]: informers feeding the table, the Ingresses' status and their Events.

pub mod controller;
pub mod routes;
pub mod serve;
pub mod tls;

use serde_json::json;

pub use controller::{Config, run};
pub use routes::{Backend, RouteTable};

/// The `spec.controller` of the classes this controller serves.
pub const CONTROLLER: &str = "skiff.io/ingress";
/// The name of the class `skiff server` creates.
pub const CLASS_NAME: &str = "skiff";

/// The IngressClass `skiff server` creates at start (unless `--disable ingress`): this
/// controller's, marked default.
pub fn default_class() -> serde_json::Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IngressClass",
        "metadata": {
            "name": CLASS_NAME,
            "annotations": {routes::DEFAULT_CLASS_ANNOTATION: "true"},
            "labels": {"app.kubernetes.io/managed-by": "skiff"},
        },
        "spec": {"controller": CONTROLLER},
    })
}
