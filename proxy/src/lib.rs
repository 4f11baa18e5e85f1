//! The service proxy: a userspace round-robin proxy per Service port with ClientIP session affinity.
