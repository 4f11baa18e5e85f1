//! The service proxy: a userspace round-robin proxy per Service port with ClientIP session affinity.
//!
//! kube-proxy's userspace mode, done with splice(2): for every Service port a listener on each
//! ClusterIP (allocated from a loopback block, so bindable without privileges) and on the
//! NodePort; each accepted connection goes to the next ready endpoint, or to the client's
//! endpoint while its ClientIP affinity record is fresh.
//!
//! # Layout
//! - [`balancer`]: [`LoadBalancer`], keyed by [`ServicePortName`]: ready endpoints, round-robin,
//!   affinity records. Pure state; the caller passes the time.
//! - [`plan`]: Services + Endpoints → the desired [`Plan`] (listen addresses, endpoints,
//!   affinity per Service port). Pure.
//! - [`proxier`]: [`Proxier::sync`] diffs a plan against the open listeners and serves TCP
//!   connections (retrying refused connects on the next endpoint) and UDP flows (idle timeout),
//!   with metrics.
//! - `relay`: the bytes of one TCP connection, zero-copy with splice(2) on Linux.
//! - [`ingress`]: the built-in ingress controller (IngressClass `skiff`, controller
//!   `skiff.io/ingress`): a route table from Ingresses, an HTTP/HTTPS reverse proxy with SNI over
//!   the same balancer, the Ingresses' status and Events.
//! - [`run`](mod@run): [`Options`] (the flags of `skiff proxy`) and [`run()`], which feeds the
//!   proxier from informers on Services and Endpoints, and runs the ingress controller.

pub mod balancer;
pub mod ingress;
pub mod plan;
pub mod proxier;
mod relay;
pub mod run;

use std::net::SocketAddr;

pub use balancer::{LoadBalancer, PickError, ServicePortName};
pub use plan::{Plan, PortPlan, Protocol};
pub use proxier::{Clock, Config, ListenerInfo, Proxier, SyncReport, SystemClock};
pub use run::{Options, run};

/// What can go wrong in the proxy.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A listener could not be bound (address in use, not local, no permission).
    #[error("cannot listen on {protocol} {address}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// The protocol.
        protocol: Protocol,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The proxy's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
