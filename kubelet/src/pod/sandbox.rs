//! What a pod asks of its sandbox: identity, hostname, log directory and resolver settings.
//! Pure functions of the pod, the host's resolver file and the kubelet's cluster DNS flags.

use std::net::IpAddr;
use std::path::Path;

use k8s_openapi::api::core::v1::Pod;

use crate::runtime::{DnsConfig, PortMapping, SandboxConfig};

/// The kubelet's cluster DNS settings (`--cluster-dns`, `--cluster-domain`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterDns {
    /// The cluster DNS servers; empty when the cluster has none (pods then get the host's
    /// settings, as with the Kubernetes kubelet).
    pub servers: Vec<IpAddr>,
    /// The cluster domain (`cluster.local`).
    pub domain: String,
}

impl Default for ClusterDns {
    fn default() -> Self {
        ClusterDns {
            servers: Vec::new(),
            domain: "cluster.local".into(),
        }
    }
}

/// At most this many nameservers go in a resolv.conf (glibc reads no more).
pub const MAX_NAMESERVERS: usize = 3;
/// At most this many search domains (glibc's limit since 2.26, and the Kubernetes kubelet's).
pub const MAX_SEARCHES: usize = 32;

/// The sandbox config of `pod` (attempt 0; the runtime counts further ones), its logs under
/// `root_dir`, its resolver settings from the host's (`host_dns`), the cluster's (`cluster`) and
/// the pod's `dnsPolicy` and `dnsConfig`.
pub fn config(
    pod: &Pod,
    root_dir: &Path,
    host_dns: &DnsConfig,
    cluster: &ClusterDns,
) -> SandboxConfig {
    let meta = &pod.metadata;
    let spec = pod.spec.clone().unwrap_or_default();
    let namespace = meta.namespace.clone().unwrap_or_default();
    let name = meta.name.clone().unwrap_or_default();
    let uid = meta.uid.clone().unwrap_or_default();
    let hostname = spec
        .hostname
        .clone()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| name.clone());
    SandboxConfig {
        log_dir: super::log_dir(root_dir, &namespace, &name, &uid),
        pod_uid: uid,
        pod_namespace: namespace,
        pod_name: name,
        attempt: 0,
        labels: meta.labels.clone().unwrap_or_default(),
        annotations: meta.annotations.clone().unwrap_or_default(),
        hostname,
        dns: dns(pod, host_dns, cluster),
        host_network: spec.host_network == Some(true),
        port_mappings: port_mappings(&spec),
    }
}

/// The `hostPort`s of the pod's app containers, as the Kubernetes kubelet hands them to the
/// runtime (init containers' ports are not forwarded); ports without one are left out.
fn port_mappings(spec: &k8s_openapi::api::core::v1::PodSpec) -> Vec<PortMapping> {
    spec.containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.is_some_and(|h| h > 0))
        .map(|p| PortMapping {
            protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
            container_port: p.container_port,
            host_port: p.host_port.unwrap_or_default(),
            host_ip: p.host_ip.clone().unwrap_or_default(),
        })
        .collect()
}

/// The pod's resolver settings by its `dnsPolicy`, as the Kubernetes kubelet writes them:
/// - `ClusterFirst` (the default): the cluster DNS servers, the searches
///   `NS.svc.DOMAIN svc.DOMAIN DOMAIN` followed by the host's, and `ndots:5`; a `hostNetwork` pod
///   gets the host's settings instead (`Default`), and so does every pod when the kubelet has no
///   `--cluster-dns`.
/// - `ClusterFirstWithHostNet`: the cluster's, `hostNetwork` or not.
/// - `Default`: the host's resolver file.
/// - `None`: nothing but the pod's `dnsConfig`.
///
/// The pod's `dnsConfig` is added on top: nameservers and search domains after the others
/// (without repeats), options replacing those of the same name. Then at most
/// [`MAX_NAMESERVERS`] nameservers and [`MAX_SEARCHES`] search domains are kept.
pub fn dns(pod: &Pod, host: &DnsConfig, cluster: &ClusterDns) -> DnsConfig {
    let spec = pod.spec.clone().unwrap_or_default();
    let host_network = spec.host_network == Some(true);
    let cluster_first = match spec.dns_policy.as_deref() {
        Some("ClusterFirstWithHostNet") => true,
        Some("Default") | Some("None") => false,
        // ClusterFirst, and anything unknown as the API's default.
        _ => !host_network,
    };
    let mut dns = match spec.dns_policy.as_deref() {
        Some("None") => DnsConfig::default(),
        _ if cluster_first && !cluster.servers.is_empty() => {
            let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
            let domain = cluster.domain.trim_matches('.');
            let mut searches = Vec::new();
            if !domain.is_empty() {
                searches.push(format!("{namespace}.svc.{domain}"));
                searches.push(format!("svc.{domain}"));
                searches.push(domain.to_string());
            }
            for search in &host.searches {
                if !searches.contains(search) {
                    searches.push(search.clone());
                }
            }
            DnsConfig {
                servers: cluster.servers.iter().map(IpAddr::to_string).collect(),
                searches,
                options: vec!["ndots:5".into()],
            }
        }
        _ => host.clone(),
    };
    if let Some(extra) = spec.dns_config {
        merge(&mut dns, extra);
    }
    dns.servers.truncate(MAX_NAMESERVERS);
    dns.searches.truncate(MAX_SEARCHES);
    dns
}

/// Adds a pod's `dnsConfig` to its policy's settings.
fn merge(dns: &mut DnsConfig, extra: k8s_openapi::api::core::v1::PodDNSConfig) {
    for server in extra.nameservers.into_iter().flatten() {
        if !dns.servers.contains(&server) {
            dns.servers.push(server);
        }
    }
    for search in extra.searches.into_iter().flatten() {
        if !dns.searches.contains(&search) {
            dns.searches.push(search);
        }
    }
    for option in extra.options.into_iter().flatten() {
        let Some(name) = option.name.filter(|n| !n.is_empty()) else {
            continue;
        };
        let text = match option.value {
            Some(v) => format!("{name}:{v}"),
            None => name.clone(),
        };
        dns.options
            .retain(|o| o.split(':').next() != Some(name.as_str()));
        dns.options.push(text);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{PodDNSConfig, PodDNSConfigOption, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn host() -> DnsConfig {
        DnsConfig {
            servers: vec!["10.0.0.2".into()],
            searches: vec!["example.net".into()],
            options: vec!["ndots:1".into()],
        }
    }

    fn pod(policy: Option<&str>, config: Option<PodDNSConfig>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                uid: Some("u1".into()),
                labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                ..Default::default()
            },
            spec: Some(PodSpec {
                dns_policy: policy.map(str::to_string),
                dns_config: config,
                ..Default::default()
            }),
            status: None,
        }
    }

    fn cluster() -> ClusterDns {
        ClusterDns {
            servers: vec!["127.96.0.10".parse().unwrap()],
            domain: "cluster.local".into(),
        }
    }

    fn none() -> ClusterDns {
        ClusterDns::default()
    }

    #[test]
    fn cluster_first_without_cluster_dns_is_the_hosts() {
        assert_eq!(
            dns(&pod(Some("ClusterFirst"), None), &host(), &none()),
            host()
        );
        assert_eq!(dns(&pod(None, None), &host(), &none()), host());
        assert_eq!(dns(&pod(Some("Default"), None), &host(), &none()), host());
        assert_eq!(
            dns(
                &pod(Some("ClusterFirstWithHostNet"), None),
                &host(),
                &none()
            ),
            host()
        );
    }

    #[test]
    fn cluster_first_searches_the_pods_namespace_first() {
        let want = DnsConfig {
            servers: vec!["127.96.0.10".into()],
            searches: vec![
                "ns.svc.cluster.local".into(),
                "svc.cluster.local".into(),
                "cluster.local".into(),
                "example.net".into(),
            ],
            options: vec!["ndots:5".into()],
        };
        assert_eq!(
            dns(&pod(Some("ClusterFirst"), None), &host(), &cluster()),
            want
        );
        // ClusterFirst is the API's default.
        assert_eq!(dns(&pod(None, None), &host(), &cluster()), want);
        // Default is the host's even with a cluster DNS.
        assert_eq!(
            dns(&pod(Some("Default"), None), &host(), &cluster()),
            host()
        );
        assert_eq!(
            dns(&pod(Some("None"), None), &host(), &cluster()),
            DnsConfig::default()
        );
        // A host search that repeats a cluster one is not listed twice.
        let mut repeated = host();
        repeated.searches = vec!["cluster.local".into(), "corp".into()];
        assert_eq!(
            dns(&pod(None, None), &repeated, &cluster()).searches,
            [
                "ns.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
                "corp"
            ]
        );
    }

    #[test]
    fn host_network_pods_need_cluster_first_with_host_net() {
        let mut p = pod(Some("ClusterFirst"), None);
        p.spec.as_mut().unwrap().host_network = Some(true);
        assert_eq!(dns(&p, &host(), &cluster()), host());
        p.spec.as_mut().unwrap().dns_policy = Some("ClusterFirstWithHostNet".into());
        let d = dns(&p, &host(), &cluster());
        assert_eq!(d.servers, ["127.96.0.10"]);
        assert_eq!(d.searches[0], "ns.svc.cluster.local");
    }

    #[test]
    fn another_cluster_domain_and_several_servers() {
        let c = ClusterDns {
            servers: vec!["10.0.0.10".parse().unwrap(), "fd00::10".parse().unwrap()],
            domain: "corp.internal.".into(),
        };
        let d = dns(&pod(None, None), &DnsConfig::default(), &c);
        assert_eq!(d.servers, ["10.0.0.10", "fd00::10"]);
        assert_eq!(
            d.searches,
            ["ns.svc.corp.internal", "svc.corp.internal", "corp.internal"]
        );
    }

    #[test]
    fn dns_config_adds_to_the_policy() {
        let extra = PodDNSConfig {
            nameservers: Some(vec!["10.0.0.2".into(), "10.0.0.9".into()]),
            searches: Some(vec!["svc.local".into()]),
            options: Some(vec![
                PodDNSConfigOption {
                    name: Some("ndots".into()),
                    value: Some("5".into()),
                },
                PodDNSConfigOption {
                    name: Some("edns0".into()),
                    value: None,
                },
            ]),
        };
        let d = dns(&pod(Some("Default"), Some(extra.clone())), &host(), &none());
        assert_eq!(d.servers, ["10.0.0.2", "10.0.0.9"]);
        assert_eq!(d.searches, ["example.net", "svc.local"]);
        assert_eq!(d.options, ["ndots:5", "edns0"]);
        let d = dns(&pod(Some("None"), Some(extra.clone())), &host(), &none());
        assert_eq!(d.servers, ["10.0.0.2", "10.0.0.9"]);
        assert_eq!(d.searches, ["svc.local"]);
        // On top of ClusterFirst: the pod's ndots replaces the cluster's.
        let mut less = extra;
        less.options = Some(vec![PodDNSConfigOption {
            name: Some("ndots".into()),
            value: Some("2".into()),
        }]);
        let d = dns(&pod(None, Some(less)), &host(), &cluster());
        assert_eq!(d.servers, ["127.96.0.10", "10.0.0.2", "10.0.0.9"]);
        assert_eq!(d.searches.last().map(String::as_str), Some("svc.local"));
        assert_eq!(d.options, ["ndots:2"]);
    }

    #[test]
    fn at_most_three_nameservers_and_thirty_two_searches() {
        let extra = PodDNSConfig {
            nameservers: Some((1..=5).map(|i| format!("10.0.0.{i}")).collect()),
            searches: Some((0..40).map(|i| format!("s{i}.example")).collect()),
            options: None,
        };
        let d = dns(&pod(None, Some(extra)), &host(), &cluster());
        assert_eq!(d.servers, ["127.96.0.10", "10.0.0.1", "10.0.0.2"]);
        assert_eq!(d.searches.len(), MAX_SEARCHES);
        assert_eq!(d.searches[0], "ns.svc.cluster.local");
    }

    #[test]
    fn host_ports_of_app_containers_are_mapped() {
        use k8s_openapi::api::core::v1::{Container, ContainerPort};
        let port = |container_port, host_port: Option<i32>, protocol: Option<&str>| ContainerPort {
            container_port,
            host_port,
            protocol: protocol.map(str::to_string),
            ..Default::default()
        };
        let mut p = pod(None, None);
        let spec = p.spec.as_mut().unwrap();
        spec.containers = vec![
            Container {
                name: "web".into(),
                ports: Some(vec![port(80, Some(8080), None), port(9090, None, None)]),
                ..Default::default()
            },
            Container {
                name: "dns".into(),
                ports: Some(vec![ContainerPort {
                    host_ip: Some("127.0.0.1".into()),
                    ..port(53, Some(5353), Some("UDP"))
                }]),
                ..Default::default()
            },
        ];
        spec.init_containers = Some(vec![Container {
            name: "init".into(),
            ports: Some(vec![port(1, Some(1001), None)]),
            ..Default::default()
        }]);
        let c = config(&p, Path::new("/k"), &host(), &none());
        assert_eq!(
            c.port_mappings,
            [
                PortMapping {
                    protocol: "TCP".into(),
                    container_port: 80,
                    host_port: 8080,
                    host_ip: String::new(),
                },
                PortMapping {
                    protocol: "UDP".into(),
                    container_port: 53,
                    host_port: 5353,
                    host_ip: "127.0.0.1".into(),
                },
            ]
        );
    }

    #[test]
    fn sandbox_identity_and_log_dir() {
        let mut p = pod(None, None);
        let c = config(&p, Path::new("/k"), &host(), &none());
        assert_eq!(
            (
                c.pod_uid.as_str(),
                c.pod_name.as_str(),
                c.pod_namespace.as_str()
            ),
            ("u1", "web", "ns")
        );
        assert_eq!(c.hostname, "web");
        assert_eq!(c.log_dir, Path::new("/k/logs/ns_web_u1"));
        assert_eq!(c.labels["app"], "web");
        assert!(!c.host_network);
        let spec = p.spec.as_mut().unwrap();
        spec.hostname = Some("box".into());
        spec.host_network = Some(true);
        let c = config(&p, Path::new("/k"), &host(), &none());
        assert_eq!(c.hostname, "box");
        assert!(c.host_network);
    }
}
