//! What a pod asks of its sandbox: identity, hostname, log directory and resolver settings.
//! Pure functions of the pod and the host's resolver file.

use std::path::Path;

use k8s_openapi::api::core::v1::Pod;

use crate::runtime::{DnsConfig, SandboxConfig};

/// The sandbox config of `pod` (attempt 0; the runtime counts further ones), its logs under
/// `root_dir`, its resolver settings from the host's (`host_dns`) and the pod's `dnsPolicy` and
/// `dnsConfig`.
pub fn config(pod: &Pod, root_dir: &Path, host_dns: &DnsConfig) -> SandboxConfig {
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
        dns: dns(pod, host_dns),
        host_network: spec.host_network == Some(true),
    }
}

/// The pod's resolver settings. skiff has no cluster DNS yet, so `ClusterFirst` (and
/// `ClusterFirstWithHostNet`) fall back to the host's settings, as the Kubernetes kubelet does
/// without `--cluster-dns`; `None` starts empty. The pod's `dnsConfig` is added on top:
/// nameservers and search domains after the others (without repeats), options replacing those of
/// the same name.
pub fn dns(pod: &Pod, host: &DnsConfig) -> DnsConfig {
    let spec = pod.spec.clone().unwrap_or_default();
    let mut dns = match spec.dns_policy.as_deref() {
        Some("None") => DnsConfig::default(),
        _ => host.clone(),
    };
    let Some(extra) = spec.dns_config else {
        return dns;
    };
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
    dns
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

    #[test]
    fn cluster_first_without_cluster_dns_is_the_hosts() {
        assert_eq!(dns(&pod(Some("ClusterFirst"), None), &host()), host());
        assert_eq!(dns(&pod(None, None), &host()), host());
        assert_eq!(dns(&pod(Some("Default"), None), &host()), host());
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
        let d = dns(&pod(Some("Default"), Some(extra.clone())), &host());
        assert_eq!(d.servers, ["10.0.0.2", "10.0.0.9"]);
        assert_eq!(d.searches, ["example.net", "svc.local"]);
        assert_eq!(d.options, ["ndots:5", "edns0"]);
        let d = dns(&pod(Some("None"), Some(extra)), &host());
        assert_eq!(d.servers, ["10.0.0.2", "10.0.0.9"]);
        assert_eq!(d.searches, ["svc.local"]);
    }

    #[test]
    fn sandbox_identity_and_log_dir() {
        let mut p = pod(None, None);
        let c = config(&p, Path::new("/k"), &host());
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
        let c = config(&p, Path::new("/k"), &host());
        assert_eq!(c.hostname, "box");
        assert!(c.host_network);
    }
}
