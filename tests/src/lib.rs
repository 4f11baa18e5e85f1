//! End-to-end test harness: starts the real `skiff` binary on a temporary data dir and drives it
//! with kubectl and client libraries.
