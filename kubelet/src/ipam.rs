//! Pod IPs from the node's pod range in the loopback block.
//!
//! Linux routes all of 127.0.0.0/8 to the loopback interface, so every pod can get its own
//! address there and several pods can listen on the same port. The range is the Node's `podCIDR`
//! once node IPAM assigns one; until then [`derive_range`] picks a /24 from the node's name in
//! 127.128.0.0/9, apart from the 127.0-127.127 /9 that node IPAM hands out (127.100.N.0/24).
//!
//! Allocations are files in a directory (`<root-dir>/ipam/<ip>` holding the pod UID) so a
//! restarted kubelet keeps giving each pod the address it had; a file is claimed with an exclusive
//! create, so two allocations never share an address.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Errors of pod IP allocation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Every address of the range is taken.
    #[error("no free pod IP in {0}")]
    Exhausted(Range),
    /// The CIDR text is not an IPv4 network.
    #[error("invalid pod CIDR {0:?}")]
    InvalidCidr(String),
    /// Reading or writing the allocation directory failed.
    #[error("pod IP allocations at {path}: {source}")]
    Io {
        /// Where.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Result of IP allocation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An IPv4 network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    /// The network address.
    pub network: Ipv4Addr,
    /// The prefix length.
    pub prefix: u8,
}

impl std::fmt::Display for Range {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl std::str::FromStr for Range {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::InvalidCidr(s.to_string());
        let (ip, prefix) = s.split_once('/').ok_or_else(bad)?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| bad())?;
        let prefix: u8 = prefix.parse().map_err(|_| bad())?;
        if !(1..=30).contains(&prefix) {
            return Err(bad());
        }
        let mask = u32::MAX << (32 - prefix);
        Ok(Range {
            network: Ipv4Addr::from(u32::from(ip) & mask),
            prefix,
        })
    }
}

impl Range {
    /// The addresses pods may get: all but the network, the first host (kept for the node) and
    /// the broadcast address.
    pub fn hosts(&self) -> impl Iterator<Item = Ipv4Addr> {
        let base = u32::from(self.network);
        let size = 1u32 << (32 - self.prefix);
        (2..size - 1).map(move |i| Ipv4Addr::from(base + i))
    }

    /// Whether `ip` is inside.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = u32::MAX << (32 - self.prefix);
        u32::from(ip) & mask == u32::from(self.network)
    }
}

/// A /24 in 127.128.0.0/9 chosen by a hash of the node's name.
pub fn derive_range(node_name: &str) -> Range {
    let h = Sha256::digest(node_name.as_bytes());
    Range {
        network: Ipv4Addr::new(127, 128 | (h[0] & 0x7f), h[1], 0),
        prefix: 24,
    }
}

/// File-backed allocator.
#[derive(Debug)]
pub struct Allocator {
    dir: PathBuf,
}

impl Allocator {
    /// Opens (creating) the allocation directory.
    pub fn open(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    /// The address `pod_uid` holds, if any.
    pub fn lookup(&self, pod_uid: &str) -> Option<Ipv4Addr> {
        std::fs::read_dir(&self.dir).ok()?.flatten().find_map(|e| {
            let ip: Ipv4Addr = e.file_name().to_str()?.parse().ok()?;
            let owner = std::fs::read_to_string(e.path()).ok()?;
            (owner == pod_uid).then_some(ip)
        })
    }

    /// The pod's address: the one it holds, or the lowest free one in `range`.
    pub fn allocate(&self, range: Range, pod_uid: &str) -> Result<Ipv4Addr> {
        if let Some(ip) = self.lookup(pod_uid) {
            return Ok(ip);
        }
        for ip in range.hosts() {
            let path = self.dir.join(ip.to_string());
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(mut f) => {
                    use std::io::Write;
                    f.write_all(pod_uid.as_bytes())
                        .map_err(|source| Error::Io { path, source })?;
                    return Ok(ip);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(source) => return Err(Error::Io { path, source }),
            }
        }
        Err(Error::Exhausted(range))
    }

    /// Frees the pod's address.
    pub fn release(&self, pod_uid: &str) {
        if let Some(ip) = self.lookup(pod_uid) {
            let _ = std::fs::remove_file(self.dir.join(ip.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_parses_and_normalises() {
        let r: Range = "127.100.3.7/24".parse().unwrap();
        assert_eq!(r.network, Ipv4Addr::new(127, 100, 3, 0));
        assert_eq!(r.to_string(), "127.100.3.0/24");
        assert!(r.contains(Ipv4Addr::new(127, 100, 3, 200)));
        assert!(!r.contains(Ipv4Addr::new(127, 100, 4, 1)));
        assert!("nope".parse::<Range>().is_err());
        assert!("127.0.0.0/31".parse::<Range>().is_err());
        let hosts: Vec<_> = r.hosts().collect();
        assert_eq!(hosts.len(), 253);
        assert_eq!(hosts[0], Ipv4Addr::new(127, 100, 3, 2));
        assert_eq!(*hosts.last().unwrap(), Ipv4Addr::new(127, 100, 3, 254));
    }

    #[test]
    fn derived_ranges_avoid_node_ipam_block_and_differ_by_node() {
        let a = derive_range("node-a");
        let b = derive_range("node-b");
        assert_eq!(a, derive_range("node-a"));
        assert_ne!(a, b);
        for r in [a, b] {
            assert!(r.network.octets()[1] >= 128);
            assert_eq!(r.prefix, 24);
        }
    }

    #[test]
    fn allocation_is_stable_distinct_persistent_and_exhaustible() {
        let dir = tempfile::tempdir().unwrap();
        let range: Range = "127.100.0.0/29".parse().unwrap(); // 5 pod addresses
        let alloc = Allocator::open(dir.path()).unwrap();
        let a = alloc.allocate(range, "pod-a").unwrap();
        let b = alloc.allocate(range, "pod-b").unwrap();
        assert_ne!(a, b);
        assert_eq!(
            alloc.allocate(range, "pod-a").unwrap(),
            a,
            "same pod, same IP"
        );
        let reopened = Allocator::open(dir.path()).unwrap();
        assert_eq!(reopened.lookup("pod-b"), Some(b));
        for i in 0..3 {
            reopened.allocate(range, &format!("p{i}")).unwrap();
        }
        assert!(matches!(
            reopened.allocate(range, "one-too-many"),
            Err(Error::Exhausted(_))
        ));
        reopened.release("pod-a");
        assert_eq!(
            reopened.allocate(range, "late").unwrap(),
            a,
            "freed IP reused"
        );
    }
}
