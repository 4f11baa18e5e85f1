//! Node IPAM: hands each node a pod range (`spec.podCIDR`) carved out of the cluster's pod range,
//! by default `/24`s of `127.100.0.0/16` inside the loopback block.

/// The shell: what the controller watches, and its reconcile through the API.
pub(crate) mod controller;

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

/// Why a range could not be handed out or parsed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// Not `a.b.c.d/n`, or the node mask is not inside the cluster mask.
    #[error("invalid CIDR {0:?}")]
    Invalid(String),
    /// Every range is taken.
    #[error("no pod range left in {0}")]
    Exhausted(String),
}

/// `pub type Result` of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Parses `a.b.c.d/n` into the network address and prefix length.
pub fn parse_cidr(s: &str) -> Result<(u32, u8)> {
    let bad = || Error::Invalid(s.to_string());
    let (ip, len) = s.split_once('/').ok_or_else(bad)?;
    let ip: Ipv4Addr = ip.parse().map_err(|_| bad())?;
    let len: u8 = len.parse().map_err(|_| bad())?;
    if len > 32 {
        return Err(bad());
    }
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    Ok((u32::from(ip) & mask, len))
}

/// Hands out the node ranges of one cluster range, lowest free first.
#[derive(Clone, Debug)]
pub struct Allocator {
    base: u32,
    cluster_len: u8,
    node_len: u8,
    used: BTreeSet<u32>,
}

impl Allocator {
    /// An allocator of `/node_len` ranges inside `cluster` (e.g. `127.100.0.0/16`, 24).
    pub fn new(cluster: &str, node_len: u8) -> Result<Allocator> {
        let (base, cluster_len) = parse_cidr(cluster)?;
        if node_len < cluster_len || node_len > 32 || node_len - cluster_len > 24 {
            return Err(Error::Invalid(format!("{cluster} with /{node_len} nodes")));
        }
        Ok(Allocator {
            base,
            cluster_len,
            node_len,
            used: BTreeSet::new(),
        })
    }

    fn count(&self) -> u32 {
        1 << (self.node_len - self.cluster_len)
    }

    fn cidr(&self, index: u32) -> String {
        let ip = Ipv4Addr::from(self.base + (index << (32 - self.node_len)));
        format!("{ip}/{}", self.node_len)
    }

    fn index(&self, cidr: &str) -> Option<u32> {
        let (net, len) = parse_cidr(cidr).ok()?;
        if len != self.node_len || net < self.base {
            return None;
        }
        let index = (net - self.base) >> (32 - self.node_len);
        (index < self.count()).then_some(index)
    }

    /// Marks a range a node already has as taken; false when it is not one of ours.
    pub fn occupy(&mut self, cidr: &str) -> bool {
        match self.index(cidr) {
            Some(i) => {
                self.used.insert(i);
                true
            }
            None => false,
        }
    }

    /// Frees the range of a node that left.
    pub fn release(&mut self, cidr: &str) {
        if let Some(i) = self.index(cidr) {
            self.used.remove(&i);
        }
    }

    /// Takes the lowest free range.
    pub fn allocate(&mut self) -> Result<String> {
        let i = (0..self.count())
            .find(|i| !self.used.contains(i))
            .ok_or_else(|| {
                Error::Exhausted(format!(
                    "{}/{}",
                    Ipv4Addr::from(self.base),
                    self.cluster_len
                ))
            })?;
        self.used.insert(i);
        Ok(self.cidr(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hands_out_the_lowest_free_range() {
        let mut a = Allocator::new("127.100.0.0/16", 24).unwrap();
        assert_eq!(a.allocate().unwrap(), "127.100.0.0/24");
        assert!(a.occupy("127.100.2.0/24"));
        assert_eq!(a.allocate().unwrap(), "127.100.1.0/24");
        assert_eq!(a.allocate().unwrap(), "127.100.3.0/24");
        a.release("127.100.1.0/24");
        assert_eq!(a.allocate().unwrap(), "127.100.1.0/24");
        assert!(!a.occupy("10.0.0.0/24"), "not ours");
        assert!(!a.occupy("127.100.0.0/25"), "another size");
    }

    #[test]
    fn runs_out() {
        let mut a = Allocator::new("127.100.0.0/30", 31).unwrap();
        assert_eq!(a.allocate().unwrap(), "127.100.0.0/31");
        assert_eq!(a.allocate().unwrap(), "127.100.0.2/31");
        assert!(matches!(a.allocate(), Err(Error::Exhausted(_))));
    }

    #[test]
    fn rejects_bad_ranges() {
        assert!(Allocator::new("127.100.0.0", 24).is_err());
        assert!(Allocator::new("127.100.0.0/24", 16).is_err());
        assert_eq!(
            parse_cidr("127.100.7.9/16").unwrap(),
            (u32::from(Ipv4Addr::new(127, 100, 0, 0)), 16)
        );
    }
}
