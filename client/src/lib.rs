//! The client and informer layer every component builds on: a typed HTTPS client for the served
//! kinds, and client-go's list-watch machinery (reflector, indexed cache, shared informers, a
//! rate-limited work queue).
//!
//! It is a crate of its own because the scheduler, kubelet, proxy and controllers must reach the
//! log only through the API server, exactly as Kubernetes components do, and share one
//! implementation of that discipline.
//!
//! # Layout
//! - [`balancer`]: a `--server` list of several API servers, behind a loopback relay that fails
//!   over to the next when one stops accepting.
//! - [`connect`] and [`ClientConfig`]: a [`Client`] from a kubeconfig, a server URL and token, or a
//!   join token that pins the cluster CA by its hash ([`join`]); [`bootstrap`]: an agent's own
//!   client certificates, asked for with the join token through CertificateSigningRequests.
//! - The transport is kube-rs: [`Client`] and [`Api`] are kube's, so every served kind and
//!   subresource (status, binding, scale, log) is reachable with its typed calls.
//! - [`informer`]: the reflector (list, then watch from the list's revision; relist on 410 Gone;
//!   rewatch from the last seen revision on a broken stream; backoff with jitter), event handlers
//!   and periodic resync; [`SharedInformerFactory`] shares one watch per kind within a process.
//! - [`cache`]: the thread-safe indexed store an informer keeps.
//! - [`workqueue`]: the rate-limited work queue controllers drain.
//! - [`events`]: recording Events about objects, repeated ones counted on the first.
//! - [`leaderelection`]: one active replica of a singleton, through a `coordination.k8s.io/v1`
//!   Lease, as client-go's leader election.

pub mod balancer;
pub mod bootstrap;
pub mod cache;
mod config;
pub mod events;
pub mod informer;
pub mod join;
pub mod leaderelection;
pub mod retry;
mod transport;
pub mod workqueue;

pub use cache::{Cache, index, key_of};
pub use config::{ClientConfig, connect, connect_to, connect_with_certificate, install_crypto};
pub use informer::{
    EventHandler, Informer, InformerStats, ListOptions, SharedInformerFactory, handler_fn,
};
pub use join::JoinToken;
pub use kube::{Api, Client, Resource, ResourceExt, api};
pub use workqueue::{RateLimiter, WorkQueue};

/// What can go wrong building a client or talking to the API server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig could not be read or used.
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig {
        /// The file.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// The client configuration is incomplete or contradictory.
    #[error("client configuration: {0}")]
    Config(String),
    /// A join token that does not parse.
    #[error("join token: {0}")]
    BadToken(String),
    /// The server's CA does not match the hash the join token carries.
    #[error(
        "the server at {server} presented a CA whose SHA-256 is {actual}, but the join token expects {expected}; refusing to trust it"
    )]
    CaMismatch {
        /// The server URL.
        server: String,
        /// The hash in the token.
        expected: String,
        /// The hash of what the server sent.
        actual: String,
    },
    /// The server could not be reached.
    #[error("cannot reach the API server at {server}: {message}")]
    Unreachable {
        /// The server URL.
        server: String,
        /// The underlying error.
        message: String,
    },
    /// A request to the API server failed.
    #[error("{what}: {source}")]
    Request {
        /// What the request was for.
        what: String,
        /// How it failed.
        source: kube::Error,
    },
    /// An error from the API or the transport.
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

impl Error {
    /// Whether trying again later may succeed: the server could not be reached or could not
    /// serve (see [`transient`]). A configuration the server can never accept (a malformed
    /// token, a CA that does not match the join token's hash, an unreadable file, a refused
    /// credential) is not.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Unreachable { .. } => true,
            Error::Request { source, .. } | Error::Kube(source) => transient(source),
            Error::Kubeconfig { .. }
            | Error::Config(_)
            | Error::BadToken(_)
            | Error::CaMismatch { .. } => false,
        }
    }
}

/// Whether `err` says the API server was not reached, or could not serve for now (429 and 5xx
/// answers), rather than that the request itself is wrong.
pub fn transient(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        kube::Error::HyperError(_)
        | kube::Error::Service(_)
        | kube::Error::ReadEvents(_)
        | kube::Error::HttpError(_) => true,
        _ => false,
    }
}

/// This crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The HTTP status code of an API error, if `err` is one.
pub fn status_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}
