//! The client and informer layer every component builds on: a typed HTTPS client for the served
//! kinds, and client-go's list-watch machinery (reflector, indexed cache, shared informers, a
//! rate-limited work queue).
//!
//! It is a crate of its own because the scheduler, kubelet, proxy and controllers must reach the
//! log only through the API server, exactly as Kubernetes components do, and share one
//! implementation of that discipline.
