//! The kubelet: registers its Node, heartbeats with a Lease, reports status on change or on its
//! report interval, and runs this node's pods with a process runtime.
