//! The endpoints and EndpointSlice controllers' pure part: from a Service and the pods of its
//! namespace, the `Endpoints` object and the EndpointSlices it should have.
//!
//! Only Services with a selector are managed; a Service without one leaves its Endpoints and
//! EndpointSlices to the user. A pod contributes an address when it has an IP and is not terminal;
//! ready pods are `addresses`, the others `notReadyAddresses` (all are ready with
//! `publishNotReadyAddresses`). Named target ports are resolved per pod against its container
//! ports, so pods of one Service may listen on different numbers.

/// The shell: what the controller watches, and its reconcile through the API.
pub(crate) mod controller;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference, Pod, Service,
    ServicePort,
};
use k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointConditions, EndpointPort as SlicePort, EndpointSlice,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::pods;

/// The label naming the Service of an EndpointSlice.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The label naming who manages an EndpointSlice.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// Our value of [`MANAGED_BY_LABEL`] (the same as kube-controller-manager's, so tools recognise it).
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
/// The label marking the Endpoints of a headless Service.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
/// At most this many endpoints go in one EndpointSlice.
pub const MAX_ENDPOINTS_PER_SLICE: usize = 100;

/// The selector of a Service that the controller manages, `None` for selector-less Services.
pub fn selector(svc: &Service) -> Option<&BTreeMap<String, String>> {
    svc.spec
        .as_ref()?
        .selector
        .as_ref()
        .filter(|s| !s.is_empty())
}

/// Whether `pod` is selected by the Service.
pub fn selects(svc: &Service, pod: &Pod) -> bool {
    let Some(sel) = selector(svc) else {
        return false;
    };
    let labels = pod.metadata.labels.as_ref();
    sel.iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

fn is_headless(svc: &Service) -> bool {
    svc.spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .is_some_and(|ip| ip == "None")
}

fn publish_not_ready(svc: &Service) -> bool {
    svc.spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false)
}

fn service_ports(svc: &Service) -> &[ServicePort] {
    svc.spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or(&[])
}

/// The port number a Service port reaches on `pod`: the target port's number, the pod's container
/// port of that name (and protocol), or the Service port itself when no target port is given.
pub fn resolve_port(pod: &Pod, port: &ServicePort) -> Option<i32> {
    match &port.target_port {
        None => Some(port.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => {
            let protocol = port.protocol.as_deref().unwrap_or("TCP");
            let spec = pod.spec.as_ref()?;
            spec.containers
                .iter()
                .chain(spec.init_containers.iter().flatten())
                .flat_map(|c| c.ports.iter().flatten())
                .find(|p| {
                    p.name.as_deref() == Some(name.as_str())
                        && p.protocol.as_deref().unwrap_or("TCP") == protocol
                })
                .map(|p| p.container_port)
        }
    }
}

fn target_ref(pod: &Pod) -> ObjectReference {
    ObjectReference {
        kind: Some("Pod".into()),
        namespace: pod.metadata.namespace.clone(),
        name: pod.metadata.name.clone(),
        uid: pod.metadata.uid.clone(),
        ..ObjectReference::default()
    }
}

fn pod_ip(pod: &Pod) -> Option<&str> {
    pod.status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .filter(|ip| !ip.is_empty())
}

fn hostname(svc: &Service, pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    let host = spec.hostname.as_ref()?;
    (spec.subdomain.as_deref() == svc.metadata.name.as_deref()).then(|| host.clone())
}

/// Whether a pod may appear at all: it has an IP, is not terminal, and (unless terminating pods are
/// included) is not being deleted.
fn eligible(pod: &Pod, include_terminating: bool) -> bool {
    pod_ip(pod).is_some()
        && !pods::is_terminal(pod)
        && (include_terminating || !pods::is_deleting(&pod.metadata))
}

/// The resolved ports of `pod` for the Service; `None` when the Service has ports and none resolve.
fn pod_ports(svc: &Service, pod: &Pod) -> Option<Vec<EndpointPort>> {
    let ports = service_ports(svc);
    let resolved: Vec<EndpointPort> = ports
        .iter()
        .filter_map(|sp| {
            resolve_port(pod, sp).map(|n| EndpointPort {
                name: sp.name.clone(),
                port: n,
                protocol: Some(sp.protocol.clone().unwrap_or_else(|| "TCP".into())),
                app_protocol: sp.app_protocol.clone(),
            })
        })
        .collect();
    if !ports.is_empty() && resolved.is_empty() {
        return None;
    }
    Some(resolved)
}

/// A port set in a comparable form: (name, number, protocol), sorted.
type PortKey = Vec<(String, i32, String)>;
/// One subset being built: its ports, ready and not-ready addresses.
type Subset = (
    Vec<EndpointPort>,
    Vec<EndpointAddress>,
    Vec<EndpointAddress>,
);

fn port_key(ports: &[EndpointPort]) -> PortKey {
    let mut key: Vec<_> = ports
        .iter()
        .map(|p| {
            (
                p.name.clone().unwrap_or_default(),
                p.port,
                p.protocol.clone().unwrap_or_default(),
            )
        })
        .collect();
    key.sort();
    key
}

/// The labels of the Endpoints of `svc`: the Service's, plus the headless marker.
fn endpoints_labels(svc: &Service) -> BTreeMap<String, String> {
    let mut labels = svc.metadata.labels.clone().unwrap_or_default();
    if is_headless(svc) {
        labels.insert(HEADLESS_LABEL.into(), String::new());
    } else {
        labels.remove(HEADLESS_LABEL);
    }
    labels
}

/// The `Endpoints` object `svc` should have given the pods of its namespace; `None` for a Service
/// without a selector (left to the user).
pub fn desired_endpoints<'a>(
    svc: &Service,
    pods: impl IntoIterator<Item = &'a Pod>,
) -> Option<Endpoints> {
    selector(svc)?;
    let publish = publish_not_ready(svc);
    // Subsets grouped by their port set; addresses sorted by IP for a stable object.
    let mut groups: BTreeMap<PortKey, Subset> = BTreeMap::new();
    for pod in pods {
        if !selects(svc, pod) || !eligible(pod, publish) {
            continue;
        }
        let Some(ports) = pod_ports(svc, pod) else {
            continue;
        };
        let address = EndpointAddress {
            ip: pod_ip(pod).unwrap_or_default().to_string(),
            hostname: hostname(svc, pod),
            node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            target_ref: Some(target_ref(pod)),
        };
        let entry = groups
            .entry(port_key(&ports))
            .or_insert_with(|| (ports, Vec::new(), Vec::new()));
        if publish || pods::is_ready(pod) {
            entry.1.push(address);
        } else {
            entry.2.push(address);
        }
    }
    let subsets: Vec<EndpointSubset> = groups
        .into_values()
        .map(|(mut ports, mut ready, mut not_ready)| {
            ready.sort_by(|a, b| a.ip.cmp(&b.ip));
            not_ready.sort_by(|a, b| a.ip.cmp(&b.ip));
            ports.sort_by(|a, b| a.name.cmp(&b.name).then(a.port.cmp(&b.port)));
            EndpointSubset {
                addresses: (!ready.is_empty()).then_some(ready),
                not_ready_addresses: (!not_ready.is_empty()).then_some(not_ready),
                ports: (!ports.is_empty()).then_some(ports),
            }
        })
        .collect();
    Some(Endpoints {
        metadata: ObjectMeta {
            name: svc.metadata.name.clone(),
            namespace: svc.metadata.namespace.clone(),
            labels: Some(endpoints_labels(svc)),
            ..ObjectMeta::default()
        },
        subsets: (!subsets.is_empty()).then_some(subsets),
    })
}

/// Whether the existing Endpoints already say what `desired` says (so no write is needed).
pub fn endpoints_equal(existing: &Endpoints, desired: &Endpoints) -> bool {
    let norm = |s: &Option<Vec<EndpointSubset>>| s.clone().unwrap_or_default();
    norm(&existing.subsets) == norm(&desired.subsets)
        && existing.metadata.labels.clone().unwrap_or_default()
            == desired.metadata.labels.clone().unwrap_or_default()
}

/// What to do to the EndpointSlices of one Service.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlicePlan {
    /// New slices (with `generateName`).
    pub create: Vec<EndpointSlice>,
    /// Existing slices with new contents (name and resourceVersion kept).
    pub update: Vec<EndpointSlice>,
    /// Names of slices to delete.
    pub delete: Vec<String>,
}

impl SlicePlan {
    /// Nothing to do.
    pub fn is_empty(&self) -> bool {
        self.create.is_empty() && self.update.is_empty() && self.delete.is_empty()
    }
}

/// Whether an EndpointSlice is managed by this controller for `service`.
pub fn is_managed_slice(slice: &EndpointSlice, service: &str) -> bool {
    let labels = slice.metadata.labels.as_ref();
    labels
        .and_then(|l| l.get(SERVICE_NAME_LABEL))
        .map(String::as_str)
        == Some(service)
        && labels
            .and_then(|l| l.get(MANAGED_BY_LABEL))
            .map(String::as_str)
            == Some(MANAGED_BY)
}

type SliceKey = (String, Vec<(String, i32, String)>);

fn slice_key(slice: &EndpointSlice) -> SliceKey {
    let ports: Vec<EndpointPort> = slice
        .ports
        .iter()
        .flatten()
        .map(|p| EndpointPort {
            name: p.name.clone(),
            port: p.port.unwrap_or(0),
            protocol: p.protocol.clone(),
            app_protocol: p.app_protocol.clone(),
        })
        .collect();
    (slice.address_type.clone(), port_key(&ports))
}

/// The EndpointSlice changes for `svc`, given the pods of its namespace and its existing managed
/// slices (`owner` is the Service's controller reference). A Service with a selector and no
/// endpoints keeps one empty slice, as Kubernetes does. Selector-less Services get an empty plan.
pub fn plan_slices<'a>(
    svc: &Service,
    pods: impl IntoIterator<Item = &'a Pod>,
    existing: &[EndpointSlice],
    owner: k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
) -> SlicePlan {
    if selector(svc).is_none() {
        return SlicePlan::default();
    }
    let name = svc.metadata.name.clone().unwrap_or_default();
    let publish = publish_not_ready(svc);
    let mut groups: BTreeMap<SliceKey, (Vec<SlicePort>, Vec<Endpoint>)> = BTreeMap::new();
    for pod in pods {
        if !selects(svc, pod) || !eligible(pod, true) {
            continue;
        }
        let Some(ports) = pod_ports(svc, pod) else {
            continue;
        };
        let ip = pod_ip(pod).unwrap_or_default().to_string();
        let address_type = if ip.contains(':') { "IPv6" } else { "IPv4" };
        let terminating = pods::is_deleting(&pod.metadata);
        let serving = publish || pods::is_ready(pod);
        let endpoint = Endpoint {
            addresses: vec![ip],
            conditions: Some(EndpointConditions {
                ready: Some(serving && (!terminating || publish)),
                serving: Some(serving),
                terminating: Some(terminating),
            }),
            hostname: hostname(svc, pod),
            node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            target_ref: Some(target_ref(pod)),
            ..Endpoint::default()
        };
        let key = (address_type.to_string(), port_key(&ports));
        let entry = groups.entry(key).or_insert_with(|| {
            let mut sp: Vec<SlicePort> = ports
                .iter()
                .map(|p| SlicePort {
                    name: p.name.clone(),
                    port: Some(p.port),
                    protocol: p.protocol.clone(),
                    app_protocol: p.app_protocol.clone(),
                })
                .collect();
            sp.sort_by(|a, b| a.name.cmp(&b.name).then(a.port.cmp(&b.port)));
            (sp, Vec::new())
        });
        entry.1.push(endpoint);
    }
    if groups.is_empty() {
        groups.insert(("IPv4".into(), Vec::new()), (Vec::new(), Vec::new()));
    }

    let mut labels = svc.metadata.labels.clone().unwrap_or_default();
    labels.insert(SERVICE_NAME_LABEL.into(), name.clone());
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    if is_headless(svc) {
        labels.insert(HEADLESS_LABEL.into(), String::new());
    }

    // Existing slices by key, oldest name first, to be reused before anything is created.
    let mut unused: BTreeMap<SliceKey, Vec<&EndpointSlice>> = BTreeMap::new();
    let mut sorted: Vec<&EndpointSlice> = existing.iter().collect();
    sorted.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for s in sorted {
        unused.entry(slice_key(s)).or_default().push(s);
    }

    let mut plan = SlicePlan::default();
    for (key, (ports, mut endpoints)) in groups {
        endpoints.sort_by(|a, b| a.addresses.cmp(&b.addresses));
        let chunks: Vec<Vec<Endpoint>> = if endpoints.is_empty() {
            vec![Vec::new()]
        } else {
            endpoints
                .chunks(MAX_ENDPOINTS_PER_SLICE)
                .map(<[Endpoint]>::to_vec)
                .collect()
        };
        let mut reusable = unused.remove(&key).unwrap_or_default().into_iter();
        for chunk in chunks {
            let desired = EndpointSlice {
                metadata: ObjectMeta {
                    generate_name: Some(format!("{name}-")),
                    namespace: svc.metadata.namespace.clone(),
                    labels: Some(labels.clone()),
                    owner_references: Some(vec![owner.clone()]),
                    ..ObjectMeta::default()
                },
                address_type: key.0.clone(),
                endpoints: chunk,
                ports: Some(ports.clone()),
            };
            match reusable.next() {
                Some(old) => {
                    let same = old.endpoints == desired.endpoints
                        && old.ports.clone().unwrap_or_default() == ports
                        && old.metadata.labels.as_ref() == Some(&labels);
                    if !same {
                        let mut updated = old.clone();
                        updated.endpoints = desired.endpoints;
                        updated.ports = desired.ports;
                        updated.metadata.labels = Some(labels.clone());
                        plan.update.push(updated);
                    }
                }
                None => plan.create.push(desired),
            }
        }
        plan.delete
            .extend(reusable.filter_map(|s| s.metadata.name.clone()));
    }
    plan.delete.extend(
        unused
            .into_values()
            .flatten()
            .filter_map(|s| s.metadata.name.clone()),
    );
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::testing::{pod, running};
    use k8s_openapi::api::core::v1::{Container, ContainerPort, ServiceSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

    fn service(selector: Option<&[(&str, &str)]>, ports: Vec<ServicePort>) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                uid: Some("svc-uid".into()),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec {
                selector: selector.map(|s| {
                    s.iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect()
                }),
                ports: Some(ports),
                ..ServiceSpec::default()
            }),
            status: None,
        }
    }

    fn named_port(name: &str, target: &str) -> ServicePort {
        ServicePort {
            name: Some(name.into()),
            port: 80,
            target_port: Some(IntOrString::String(target.into())),
            ..ServicePort::default()
        }
    }

    fn with_container_port(mut p: Pod, name: &str, number: i32) -> Pod {
        p.spec.as_mut().unwrap().containers = vec![Container {
            name: "c".into(),
            ports: Some(vec![ContainerPort {
                name: Some(name.into()),
                container_port: number,
                ..ContainerPort::default()
            }]),
            ..Container::default()
        }];
        p
    }

    fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: "Service".into(),
            name: "web".into(),
            uid: "svc-uid".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    #[test]
    fn selectorless_services_are_left_alone() {
        let svc = service(None, vec![named_port("http", "http")]);
        let p = running(pod("a", &[("app", "web")], 0), "n", "127.0.0.2", Some(1));
        assert_eq!(desired_endpoints(&svc, [&p]), None);
        assert!(plan_slices(&svc, [&p], &[], owner()).is_empty());
    }

    #[test]
    fn ready_and_not_ready_addresses_with_named_ports_per_pod() {
        let svc = service(Some(&[("app", "web")]), vec![named_port("http", "http")]);
        let a = with_container_port(
            running(pod("a", &[("app", "web")], 0), "n1", "127.0.0.2", Some(1)),
            "http",
            8080,
        );
        let b = with_container_port(
            running(pod("b", &[("app", "web")], 0), "n1", "127.0.0.3", None),
            "http",
            8080,
        );
        // Another number behind the same name: a subset of its own.
        let c = with_container_port(
            running(pod("c", &[("app", "web")], 0), "n2", "127.0.0.4", Some(1)),
            "http",
            9090,
        );
        // Not selected, no IP, no such port, terminal: left out.
        let other = running(pod("x", &[("app", "db")], 0), "n1", "127.0.0.5", Some(1));
        let no_ip = with_container_port(pod("y", &[("app", "web")], 0), "http", 8080);
        let no_port = running(pod("z", &[("app", "web")], 0), "n1", "127.0.0.6", Some(1));
        let mut done = with_container_port(
            running(pod("d", &[("app", "web")], 0), "n1", "127.0.0.7", None),
            "http",
            8080,
        );
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());

        let ep = desired_endpoints(&svc, [&a, &b, &c, &other, &no_ip, &no_port, &done]).unwrap();
        let subsets = ep.subsets.unwrap();
        assert_eq!(subsets.len(), 2);
        let s8080 = subsets
            .iter()
            .find(|s| s.ports.as_ref().unwrap()[0].port == 8080)
            .unwrap();
        let ips = |v: &Option<Vec<EndpointAddress>>| {
            v.iter().flatten().map(|a| a.ip.clone()).collect::<Vec<_>>()
        };
        assert_eq!(ips(&s8080.addresses), ["127.0.0.2"]);
        assert_eq!(ips(&s8080.not_ready_addresses), ["127.0.0.3"]);
        assert_eq!(
            s8080.addresses.as_ref().unwrap()[0]
                .target_ref
                .as_ref()
                .unwrap()
                .name
                .as_deref(),
            Some("a")
        );
        let s9090 = subsets
            .iter()
            .find(|s| s.ports.as_ref().unwrap()[0].port == 9090)
            .unwrap();
        assert_eq!(ips(&s9090.addresses), ["127.0.0.4"]);
    }

    #[test]
    fn terminating_pods_leave_endpoints_but_stay_in_slices_as_terminating() {
        let svc = service(
            Some(&[("app", "web")]),
            vec![ServicePort {
                port: 80,
                target_port: Some(IntOrString::Int(8080)),
                ..ServicePort::default()
            }],
        );
        let mut p = running(pod("a", &[("app", "web")], 0), "n", "127.0.0.2", Some(1));
        p.metadata.deletion_timestamp = Some(Time(crate::pods::testing::at(5)));
        let ep = desired_endpoints(&svc, [&p]).unwrap();
        assert_eq!(ep.subsets, None);
        let plan = plan_slices(&svc, [&p], &[], owner());
        assert_eq!(plan.create.len(), 1);
        let c = plan.create[0].endpoints[0].conditions.clone().unwrap();
        assert_eq!(
            (c.ready, c.serving, c.terminating),
            (Some(false), Some(true), Some(true))
        );
    }

    #[test]
    fn publish_not_ready_addresses_makes_everything_ready() {
        let mut svc = service(Some(&[("app", "web")]), vec![]);
        svc.spec.as_mut().unwrap().publish_not_ready_addresses = Some(true);
        let p = running(pod("a", &[("app", "web")], 0), "n", "127.0.0.2", None);
        let ep = desired_endpoints(&svc, [&p]).unwrap();
        let s = &ep.subsets.unwrap()[0];
        assert_eq!(s.addresses.as_ref().unwrap().len(), 1);
        assert!(s.not_ready_addresses.is_none());
    }

    #[test]
    fn slices_are_reused_updated_and_deleted() {
        let svc = service(
            Some(&[("app", "web")]),
            vec![ServicePort {
                name: Some("http".into()),
                port: 80,
                ..ServicePort::default()
            }],
        );
        let a = running(pod("a", &[("app", "web")], 0), "n", "127.0.0.2", Some(1));
        // No pods: one empty placeholder slice.
        let plan = plan_slices(&svc, [], &[], owner());
        assert_eq!(plan.create.len(), 1);
        assert!(plan.create[0].endpoints.is_empty());

        let plan = plan_slices(&svc, [&a], &[], owner());
        assert_eq!(plan.create.len(), 1);
        let mut stored = plan.create[0].clone();
        stored.metadata.name = Some("web-abcde".into());
        assert_eq!(stored.endpoints.len(), 1);
        assert_eq!(
            stored.metadata.labels.as_ref().unwrap()[SERVICE_NAME_LABEL],
            "web"
        );
        // Unchanged: nothing to do.
        assert!(plan_slices(&svc, [&a], std::slice::from_ref(&stored), owner()).is_empty());
        // Readiness change: the same slice updated.
        let a2 = running(pod("a", &[("app", "web")], 0), "n", "127.0.0.2", None);
        let plan = plan_slices(&svc, [&a2], std::slice::from_ref(&stored), owner());
        assert_eq!(plan.update.len(), 1);
        assert_eq!(plan.update[0].metadata.name.as_deref(), Some("web-abcde"));
        // A second slice of the same key is surplus.
        let mut extra = stored.clone();
        extra.metadata.name = Some("web-zzzzz".into());
        let plan = plan_slices(&svc, [&a], &[stored, extra], owner());
        assert_eq!(plan.delete, ["web-zzzzz"]);
        assert!(plan.update.is_empty() && plan.create.is_empty());
    }

    #[test]
    fn slices_hold_at_most_a_hundred_endpoints() {
        let svc = service(Some(&[("app", "web")]), vec![]);
        let pods: Vec<Pod> = (0..250)
            .map(|i| {
                running(
                    pod(&format!("p{i}"), &[("app", "web")], 0),
                    "n",
                    &format!("127.0.{}.{}", i / 200, i % 200 + 1),
                    Some(1),
                )
            })
            .collect();
        let plan = plan_slices(&svc, &pods, &[], owner());
        let sizes: Vec<usize> = plan.create.iter().map(|s| s.endpoints.len()).collect();
        assert_eq!(sizes, [100, 100, 50]);
    }
}
