//! The smaller kinds: ConfigMaps, Secrets, Namespaces, Nodes, Events, Endpoints,
//! ServiceAccounts, Leases and EndpointSlices.

use std::collections::HashSet;
use std::net::IpAddr;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, Endpoints, Event, Namespace, Node, Secret, ServiceAccount,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use super::meta::{validate_label_name, validate_labels};
use super::pod::validate_taint_effect;
use super::{FieldError, Path};
use super::{decode, names, s};

/// Most bytes the data of one ConfigMap or Secret may hold.
pub const MAX_SECRET_SIZE: usize = 1024 * 1024;
const PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];
const IMMUTABLE_WHEN_SET: &str = "field is immutable when `immutable` is set";
const VALID_IP: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";

/// The fields of a ConfigMap its rules read. Its metadata is decoded and checked once, by the
/// caller (`validate_create` / `validate_update`), not again with the whole `ConfigMap`.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConfigMapData {
    binary_data: Option<std::collections::BTreeMap<String, k8s_openapi::ByteString>>,
    data: Option<std::collections::BTreeMap<String, String>>,
    immutable: Option<bool>,
}

pub(crate) fn validate_config_map(
    new: &Value,
    old: Option<&Value>,
) -> Result<Vec<FieldError>, FieldError> {
    let cm: ConfigMapData = decode(new, "")?;
    let mut errs = Vec::new();
    if let Some(old) = old {
        let old: ConfigMapData = decode(old, "")?;
        if old.immutable == Some(true) {
            if cm.immutable != Some(true) {
                errs.push(FieldError::forbidden("immutable", IMMUTABLE_WHEN_SET));
            }
            if cm.data != old.data {
                errs.push(FieldError::forbidden("data", IMMUTABLE_WHEN_SET));
            }
            if cm.binary_data != old.binary_data {
                errs.push(FieldError::forbidden("binaryData", IMMUTABLE_WHEN_SET));
            }
        }
    }
    let mut total = 0;
    let data_path = Path::new("data");
    for (k, v) in cm.data.iter().flatten() {
        for msg in names::config_map_key(k) {
            errs.push(FieldError::invalid(data_path.key(k), k.as_str(), msg));
        }
        if cm.binary_data.as_ref().is_some_and(|b| b.contains_key(k)) {
            errs.push(FieldError::invalid(
                data_path.key(k),
                k.as_str(),
                "duplicate of key present in binaryData",
            ));
        }
        total += v.len();
    }
    for (k, v) in cm.binary_data.iter().flatten() {
        for msg in names::config_map_key(k) {
            errs.push(FieldError::invalid(
                Path::new("binaryData").key(k),
                k.as_str(),
                msg,
            ));
        }
        total += v.0.len();
    }
    if total > MAX_SECRET_SIZE {
        errs.push(FieldError::too_long("", MAX_SECRET_SIZE));
    }
    Ok(errs)
}

pub(crate) fn validate_secret(
    new: &Value,
    old: Option<&Value>,
) -> Result<Vec<FieldError>, FieldError> {
    let secret: Secret = decode(new, "")?;
    let mut errs = Vec::new();
    if let Some(old) = old {
        let old: Secret = decode(old, "")?;
        if secret.type_ != old.type_ {
            errs.push(FieldError::invalid(
                "type",
                s(&secret.type_),
                "field is immutable",
            ));
        }
        if old.immutable == Some(true) {
            if secret.immutable != Some(true) {
                errs.push(FieldError::forbidden("immutable", IMMUTABLE_WHEN_SET));
            }
            if secret.data != old.data {
                errs.push(FieldError::forbidden("data", IMMUTABLE_WHEN_SET));
            }
        }
    }
    let data_path = Path::new("data");
    let data = secret.data.clone().unwrap_or_default();
    let mut total = 0;
    for (k, v) in &data {
        for msg in names::config_map_key(k) {
            errs.push(FieldError::invalid(data_path.key(k), k.as_str(), msg));
        }
        total += v.0.len();
    }
    if total > MAX_SECRET_SIZE {
        errs.push(FieldError::too_long(&data_path, MAX_SECRET_SIZE));
    }
    let required = |errs: &mut Vec<FieldError>, key: &str| {
        if !data.contains_key(key) {
            errs.push(FieldError::required(data_path.key(key), ""));
            false
        } else {
            true
        }
    };
    let json_ok = |errs: &mut Vec<FieldError>, key: &str| {
        if let Some(bytes) = data.get(key)
            && let Err(e) = serde_json::from_slice::<serde_json::Map<String, Value>>(&bytes.0)
        {
            errs.push(FieldError::invalid(
                data_path.key(key),
                "<secret contents redacted>",
                e.to_string(),
            ));
        }
    };
    match s(&secret.type_) {
        "kubernetes.io/service-account-token" => {
            let name = secret
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("kubernetes.io/service-account.name"))
                .map(String::as_str)
                .unwrap_or("");
            if name.is_empty() {
                errs.push(FieldError::required(
                    Path::new("metadata")
                        .child("annotations")
                        .key("kubernetes.io/service-account.name"),
                    "",
                ));
            }
        }
        "kubernetes.io/dockercfg" if required(&mut errs, ".dockercfg") => {
            json_ok(&mut errs, ".dockercfg");
        }
        "kubernetes.io/dockerconfigjson" if required(&mut errs, ".dockerconfigjson") => {
            json_ok(&mut errs, ".dockerconfigjson");
        }
        "kubernetes.io/basic-auth"
            if !data.contains_key("username") && !data.contains_key("password") =>
        {
            errs.push(FieldError::required(data_path.key("username"), ""));
            errs.push(FieldError::required(data_path.key("password"), ""));
        }
        "kubernetes.io/ssh-auth" if data.get("ssh-privatekey").is_none_or(|v| v.0.is_empty()) => {
            errs.push(FieldError::required(data_path.key("ssh-privatekey"), ""));
        }
        "kubernetes.io/tls" => {
            required(&mut errs, "tls.crt");
            required(&mut errs, "tls.key");
        }
        _ => {}
    }
    Ok(errs)
}

fn validate_kube_finalizer(name: &str, path: &Path) -> Vec<FieldError> {
    let mut errs: Vec<FieldError> = names::qualified_name(name)
        .into_iter()
        .map(|msg| FieldError::invalid(path, name, msg))
        .collect();
    if !name.contains('/') && !["kubernetes", "orphan", "foregroundDeletion"].contains(&name) {
        errs.push(FieldError::invalid(
            path,
            name,
            "name is neither a standard finalizer name nor is it fully qualified",
        ));
    }
    errs
}

pub(crate) fn validate_namespace(
    new: &Value,
    old: Option<&Value>,
) -> Result<Vec<FieldError>, FieldError> {
    let ns: Namespace = decode(new, "")?;
    let mut errs = Vec::new();
    let path = Path::new("spec").child("finalizers");
    for f in ns.spec.iter().flat_map(|s| s.finalizers.iter().flatten()) {
        errs.extend(validate_kube_finalizer(f, &path));
    }
    if let Some(old) = old {
        let _: Namespace = decode(old, "")?;
    }
    Ok(errs)
}

pub(crate) fn validate_namespace_status(new: &Value) -> Result<Vec<FieldError>, FieldError> {
    let ns: Namespace = decode(new, "")?;
    let phase = ns.status.and_then(|s| s.phase).unwrap_or_default();
    let path = Path::new("status").child("Phase");
    Ok(if ns.metadata.deletion_timestamp.is_none() {
        if phase != "Active" {
            vec![FieldError::invalid(
                path,
                phase,
                "may only be 'Active' if `deletionTimestamp` is empty",
            )]
        } else {
            Vec::new()
        }
    } else if phase != "Terminating" {
        vec![FieldError::invalid(
            path,
            phase,
            "may only be 'Terminating' if `deletionTimestamp` is not empty",
        )]
    } else {
        Vec::new()
    })
}

/// A CIDR (`10.244.1.0/24`, `fd00::/64`) as Go's `net.ParseCIDR` accepts it.
fn parse_cidr(value: &str) -> Option<(IpAddr, u8)> {
    let (ip, bits) = value.split_once('/')?;
    let ip: IpAddr = ip.parse().ok()?;
    if bits.is_empty() || bits.len() > 3 || !bits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let bits: u8 = bits.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    (bits <= max).then_some((ip, bits))
}

pub(crate) fn validate_node(
    new: &Value,
    old: Option<&Value>,
) -> Result<Vec<FieldError>, FieldError> {
    let node: Node = decode(new, "")?;
    let spec = node.spec.clone().unwrap_or_default();
    let mut errs = Vec::new();
    // Kubernetes reports taints under metadata (it passes the metadata path down).
    let taints_path = Path::new("metadata").child("taints");
    let mut unique: HashSet<(String, String)> = HashSet::new();
    for (i, t) in spec.taints.iter().flatten().enumerate() {
        let idx = taints_path.index(i);
        errs.extend(validate_label_name(&t.key, &idx.child("key")));
        let value = s(&t.value);
        let msgs = names::label_value(value);
        if !msgs.is_empty() {
            errs.push(FieldError::invalid(
                idx.child("value"),
                value,
                msgs.join(";"),
            ));
        }
        errs.extend(validate_taint_effect(&t.effect, false, idx.child("effect")));
        if !unique.insert((t.effect.clone(), t.key.clone())) {
            let mut e = FieldError::duplicate(idx, serde_json::to_value(t).unwrap_or(Value::Null));
            e.detail = "taints must be unique by key and effect pair".into();
            errs.push(e);
        }
    }
    let cidrs = spec.pod_cidrs.clone().unwrap_or_default();
    let cidr_path = Path::new("spec").child("podCIDRs");
    let mut parsed = Vec::new();
    for (i, c) in cidrs.iter().enumerate() {
        match parse_cidr(c) {
            Some(p) => parsed.push(p),
            None => errs.push(FieldError::invalid(
                cidr_path.index(i),
                c.as_str(),
                "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            )),
        }
    }
    if cidrs.len() > 1 {
        let dual = parsed.len() == 2 && parsed[0].0.is_ipv4() != parsed[1].0.is_ipv4();
        if !dual || cidrs.len() > 2 {
            errs.push(FieldError::invalid(
                cidr_path.clone(),
                Value::from(cidrs.clone()),
                "may specify no more than one CIDR for each IP family",
            ));
        }
        let mut seen = HashSet::new();
        for (i, c) in cidrs.iter().enumerate() {
            if !seen.insert(c) {
                errs.push(FieldError::duplicate(cidr_path.index(i), c.as_str()));
            }
        }
    }
    if let Some(old) = old {
        let old: Node = decode(old, "")?;
        let old_spec = old.spec.unwrap_or_default();
        let old_cidrs = old_spec.pod_cidrs.unwrap_or_default();
        if !old_cidrs.is_empty() && old_cidrs != cidrs {
            errs.push(FieldError::forbidden(
                cidr_path,
                "node updates may not change podCIDR except from \"\" to valid",
            ));
        }
        let old_provider = s(&old_spec.provider_id);
        if !old_provider.is_empty() && old_provider != s(&spec.provider_id) {
            errs.push(FieldError::forbidden(
                "spec.providerID",
                "node updates may not change providerID except from \"\" to valid",
            ));
        }
        if old_spec.external_id != spec.external_id {
            errs.push(FieldError::forbidden(
                "spec.externalID",
                "may not be updated",
            ));
        }
    }
    errs.extend(validate_node_resources(&node));
    Ok(errs)
}

fn validate_node_resources(node: &Node) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(status) = &node.status else {
        return errs;
    };
    for (field, list) in [
        ("capacity", &status.capacity),
        ("allocatable", &status.allocatable),
    ] {
        for (name, q) in list.iter().flatten() {
            let p = Path::new("status").child(field).key(name);
            match super::quantity::parse_k8s(q) {
                Err(e) => errs.push(FieldError::invalid(p, q.0.as_str(), e.to_string())),
                Ok(v) if v.is_negative() => errs.push(FieldError::invalid(
                    p,
                    v.to_string(),
                    "must be greater than or equal to 0",
                )),
                Ok(_) => {}
            }
        }
    }
    errs
}

pub(crate) fn validate_node_status(new: &Value) -> Result<Vec<FieldError>, FieldError> {
    let node: Node = decode(new, "")?;
    let mut errs = validate_node_resources(&node);
    for (i, addr) in node
        .status
        .iter()
        .flat_map(|s| s.addresses.iter().flatten())
        .enumerate()
    {
        if addr.address.is_empty() {
            errs.push(FieldError::required(
                Path::new("status")
                    .child("addresses")
                    .index(i)
                    .child("address"),
                "",
            ));
        }
    }
    Ok(errs)
}

/// Events through the core/v1 API: only the legacy rules apply (Kubernetes skips the rest for
/// compatibility).
pub(crate) fn validate_event(
    new: &Value,
    _old: Option<&Value>,
    meta: &ObjectMeta,
) -> Result<Vec<FieldError>, FieldError> {
    let ev: Event = decode(new, "")?;
    let mut errs = Vec::new();
    let ns = meta.namespace.as_deref().unwrap_or("");
    let involved_ns = s(&ev.involved_object.namespace);
    let path = Path::new("involvedObject").child("namespace");
    if ev.event_time.is_none() {
        if involved_ns.is_empty() {
            if !ns.is_empty() && ns != "default" {
                errs.push(FieldError::invalid(
                    path,
                    involved_ns,
                    "does not match event.namespace",
                ));
            }
        } else if ns != involved_ns {
            errs.push(FieldError::invalid(
                path,
                involved_ns,
                "does not match event.namespace",
            ));
        }
    } else {
        if involved_ns.is_empty() && ns != "default" && ns != "kube-system" {
            errs.push(FieldError::invalid(
                path,
                involved_ns,
                "does not match event.namespace",
            ));
        }
        let controller = s(&ev.reporting_component);
        if controller.is_empty() {
            errs.push(FieldError::required("source", ""));
        }
        for msg in names::qualified_name(controller) {
            errs.push(FieldError::invalid("source", controller, msg));
        }
        let instance = s(&ev.reporting_instance);
        if instance.is_empty() {
            errs.push(FieldError::required("reportingInstance", ""));
        }
        if instance.len() > 128 {
            errs.push(FieldError::invalid(
                "reportingInstance",
                "",
                "can have at most 128 characters",
            ));
        }
        let action = s(&ev.action);
        if action.is_empty() {
            errs.push(FieldError::required("action", ""));
        }
        if action.len() > 128 {
            errs.push(FieldError::invalid(
                "action",
                "",
                "can have at most 128 characters",
            ));
        }
        let reason = s(&ev.reason);
        if reason.is_empty() {
            errs.push(FieldError::required("reason", ""));
        }
        if reason.len() > 128 {
            errs.push(FieldError::invalid(
                "reason",
                "",
                "can have at most 128 characters",
            ));
        }
        if s(&ev.message).len() > 1024 {
            errs.push(FieldError::invalid(
                "message",
                "",
                "can have at most 1024 characters",
            ));
        }
    }
    for msg in names::dns1123_subdomain(ns) {
        errs.push(FieldError::invalid("namespace", ns, msg));
    }
    Ok(errs)
}

/// Kubernetes also rejects loopback addresses here; skiff runs pods on loopback addresses of
/// one machine, so it accepts them and rejects only the other special ranges.
fn validate_non_special_ip(ip: &str, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Ok(addr) = ip.parse::<IpAddr>() else {
        return errs;
    };
    if addr.is_unspecified() {
        errs.push(FieldError::invalid(
            path.clone(),
            ip,
            "may not be unspecified (0.0.0.0)",
        ));
    }
    let (link_local, link_local_mcast) = match addr {
        IpAddr::V4(v4) => (v4.is_link_local(), v4.octets()[..3] == [224, 0, 0]),
        IpAddr::V6(v6) => (
            (v6.segments()[0] & 0xffc0) == 0xfe80,
            (v6.segments()[0] & 0xff0f) == 0xff02,
        ),
    };
    if link_local {
        errs.push(FieldError::invalid(
            path.clone(),
            ip,
            "may not be in the link-local range (169.254.0.0/16, fe80::/10)",
        ));
    }
    if link_local_mcast {
        errs.push(FieldError::invalid(
            path.clone(),
            ip,
            "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)",
        ));
    }
    errs
}

fn validate_endpoint_address(addr: &EndpointAddress, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if addr.ip.parse::<IpAddr>().is_err() {
        errs.push(FieldError::invalid(
            path.child("ip"),
            addr.ip.as_str(),
            VALID_IP,
        ));
    }
    let host = s(&addr.hostname);
    if !host.is_empty() {
        for msg in names::dns1123_label(host) {
            errs.push(FieldError::invalid(path.child("hostname"), host, msg));
        }
    }
    if let Some(node) = &addr.node_name {
        for msg in names::name_is_dns_subdomain(node, false) {
            errs.push(FieldError::invalid(
                path.child("nodeName"),
                node.as_str(),
                msg,
            ));
        }
    }
    errs.extend(validate_non_special_ip(&addr.ip, &path.child("ip")));
    errs
}

fn validate_endpoint_port(port: &EndpointPort, require_name: bool, path: &Path) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = s(&port.name);
    if require_name && name.is_empty() {
        errs.push(FieldError::required(path.child("name"), ""));
    } else if !name.is_empty() {
        for msg in names::dns1123_label(name) {
            errs.push(FieldError::invalid(path.child("name"), name, msg));
        }
    }
    for msg in names::port_num(i64::from(port.port)) {
        errs.push(FieldError::invalid(path.child("port"), port.port, msg));
    }
    let protocol = s(&port.protocol);
    if protocol.is_empty() {
        errs.push(FieldError::required(path.child("protocol"), ""));
    } else if !PROTOCOLS.contains(&protocol) {
        errs.push(FieldError::not_supported(
            path.child("protocol"),
            protocol,
            PROTOCOLS,
        ));
    }
    if let Some(app) = &port.app_protocol {
        for msg in names::qualified_name(app) {
            errs.push(FieldError::invalid(
                path.child("appProtocol"),
                app.as_str(),
                msg,
            ));
        }
    }
    errs
}

pub(crate) fn validate_endpoints(
    new: &Value,
    _old: Option<&Value>,
) -> Result<Vec<FieldError>, FieldError> {
    let ep: Endpoints = decode(new, "")?;
    let mut errs = Vec::new();
    for (i, ss) in ep.subsets.iter().flatten().enumerate() {
        let idx = Path::new("subsets").index(i);
        let ready = ss.addresses.as_deref().unwrap_or_default();
        let not_ready = ss.not_ready_addresses.as_deref().unwrap_or_default();
        if ready.is_empty() && not_ready.is_empty() {
            errs.push(FieldError::required(
                idx.clone(),
                "must specify `addresses` or `notReadyAddresses`",
            ));
        }
        for (a, addr) in ready.iter().enumerate() {
            errs.extend(validate_endpoint_address(
                addr,
                &idx.child("addresses").index(a),
            ));
        }
        for (a, addr) in not_ready.iter().enumerate() {
            errs.extend(validate_endpoint_address(
                addr,
                &idx.child("notReadyAddresses").index(a),
            ));
        }
        let ports = ss.ports.as_deref().unwrap_or_default();
        for (p, port) in ports.iter().enumerate() {
            errs.extend(validate_endpoint_port(
                port,
                ports.len() > 1,
                &idx.child("ports").index(p),
            ));
        }
    }
    Ok(errs)
}

pub(crate) fn validate_service_account(
    new: &Value,
    _old: Option<&Value>,
) -> Result<Vec<FieldError>, FieldError> {
    let _: ServiceAccount = decode(new, "")?;
    Ok(Vec::new())
}

pub(crate) fn validate_lease(
    new: &Value,
    _old: Option<&Value>,
) -> Result<Vec<FieldError>, FieldError> {
    let lease: Lease = decode(new, "")?;
    let spec = lease.spec.unwrap_or_default();
    let path = Path::new("spec");
    let mut errs = Vec::new();
    if let Some(d) = spec.lease_duration_seconds.filter(|d| *d <= 0) {
        errs.push(FieldError::invalid(
            path.child("leaseDurationSeconds"),
            d,
            "must be greater than 0",
        ));
    }
    if let Some(t) = spec.lease_transitions.filter(|t| *t < 0) {
        errs.push(FieldError::invalid(
            path.child("leaseTransitions"),
            t,
            "must be greater than or equal to 0",
        ));
    }
    if let Some(strategy) = spec.strategy.as_deref()
        && strategy != "OldestEmulationVersion"
    {
        errs.push(FieldError::not_supported(
            path.child("strategy"),
            strategy,
            &["OldestEmulationVersion"],
        ));
    }
    if spec
        .preferred_holder
        .as_deref()
        .is_some_and(|h| !h.is_empty())
        && spec.strategy.as_deref().unwrap_or("").is_empty()
    {
        errs.push(FieldError::forbidden(
            path.child("preferredHolder"),
            "may only be specified if `strategy` is defined",
        ));
    }
    Ok(errs)
}

const MAX_ENDPOINTS: usize = 1000;
const MAX_ADDRESSES: usize = 100;
const MAX_PORTS: usize = 20000;

pub(crate) fn validate_endpoint_slice(
    new: &Value,
    old: Option<&Value>,
) -> Result<Vec<FieldError>, FieldError> {
    let slice: EndpointSlice = decode(new, "")?;
    let mut errs = Vec::new();
    let address_type = slice.address_type.as_str();
    if address_type.is_empty() {
        errs.push(FieldError::required("addressType", ""));
    } else if !["FQDN", "IPv4", "IPv6"].contains(&address_type) {
        errs.push(FieldError::not_supported(
            "addressType",
            address_type,
            &["FQDN", "IPv4", "IPv6"],
        ));
    }
    let ep_path = Path::new("endpoints");
    if slice.endpoints.len() > MAX_ENDPOINTS {
        errs.push(FieldError::too_many(
            &ep_path,
            slice.endpoints.len(),
            MAX_ENDPOINTS,
        ));
    } else {
        for (i, ep) in slice.endpoints.iter().enumerate() {
            let idx = ep_path.index(i);
            let addr_path = idx.child("addresses");
            if ep.addresses.is_empty() {
                errs.push(FieldError::required(
                    addr_path.clone(),
                    "must contain at least 1 address",
                ));
            } else if ep.addresses.len() > MAX_ADDRESSES {
                errs.push(FieldError::too_many(
                    &addr_path,
                    ep.addresses.len(),
                    MAX_ADDRESSES,
                ));
            }
            for (a, addr) in ep.addresses.iter().enumerate() {
                let p = addr_path.index(a);
                match address_type {
                    "IPv4" => match addr.parse::<IpAddr>() {
                        Ok(IpAddr::V4(_)) => errs.extend(validate_non_special_ip(addr, &p)),
                        _ => errs.push(FieldError::invalid(
                            p,
                            addr.as_str(),
                            "must be a valid IPv4 address",
                        )),
                    },
                    "IPv6" => match addr.parse::<IpAddr>() {
                        Ok(IpAddr::V6(_)) => errs.extend(validate_non_special_ip(addr, &p)),
                        _ => errs.push(FieldError::invalid(
                            p,
                            addr.as_str(),
                            "must be a valid IPv6 address",
                        )),
                    },
                    "FQDN" => {
                        let name = addr.strip_suffix('.').unwrap_or(addr);
                        let msgs = names::dns1123_subdomain(name);
                        if !msgs.is_empty() {
                            errs.push(FieldError::invalid(p, name, msgs.join(",")));
                        } else if !name.contains('.') {
                            errs.push(FieldError::invalid(
                                p,
                                name,
                                "should be a domain with at least two segments separated by dots",
                            ));
                        }
                    }
                    _ => {}
                }
            }
            if let Some(node) = &ep.node_name {
                for msg in names::name_is_dns_subdomain(node, false) {
                    errs.push(FieldError::invalid(
                        idx.child("nodeName"),
                        node.as_str(),
                        msg,
                    ));
                }
            }
            errs.extend(validate_labels(
                ep.deprecated_topology.as_ref(),
                &idx.child("deprecatedTopology"),
            ));
            if let Some(host) = &ep.hostname {
                for msg in names::dns1123_label(host) {
                    errs.push(FieldError::invalid(
                        idx.child("hostname"),
                        host.as_str(),
                        msg,
                    ));
                }
            }
        }
    }
    let ports = slice.ports.as_deref().unwrap_or_default();
    let port_path = Path::new("ports");
    if ports.len() > MAX_PORTS {
        errs.push(FieldError::too_many(&port_path, ports.len(), MAX_PORTS));
    } else {
        let mut seen = HashSet::new();
        for (i, p) in ports.iter().enumerate() {
            let idx = port_path.index(i);
            let name = s(&p.name);
            if !name.is_empty() {
                for msg in names::dns1123_label(name) {
                    errs.push(FieldError::invalid(idx.child("name"), name, msg));
                }
            }
            if !seen.insert(name) {
                errs.push(FieldError::duplicate(idx.child("name"), name));
            }
            match p.protocol.as_deref() {
                None => errs.push(FieldError::required(idx.child("protocol"), "")),
                Some(proto) if !PROTOCOLS.contains(&proto) => errs.push(FieldError::not_supported(
                    idx.child("protocol"),
                    proto,
                    PROTOCOLS,
                )),
                Some(_) => {}
            }
            if let Some(port) = p.port {
                for msg in names::port_num(i64::from(port)) {
                    errs.push(FieldError::invalid(idx.child("port"), port, msg));
                }
            }
            if let Some(app) = &p.app_protocol {
                for msg in names::qualified_name(app) {
                    errs.push(FieldError::invalid(
                        idx.child("appProtocol"),
                        app.as_str(),
                        msg,
                    ));
                }
            }
        }
    }
    if let Some(old) = old {
        let old: EndpointSlice = decode(old, "")?;
        if old.address_type != slice.address_type {
            errs.push(FieldError::invalid(
                "addressType",
                json!(slice.address_type),
                "field is immutable",
            ));
        }
    }
    Ok(errs)
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::super::validate_status_update;
    use super::*;

    #[test]
    fn config_maps() {
        let cm = |data: Value| {
            create_msgs(
                "",
                "ConfigMap",
                json!({"metadata": {"name": "c"}, "data": data}),
            )
        };
        assert!(cm(json!({"app.properties": "x", "KEY_1": "y"})).is_empty());
        assert_eq!(
            cm(json!({"a/b": "x"})),
            vec![
                r#"data[a/b]: Invalid value: "a/b": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"#
            ]
        );
        assert_eq!(
            cm(json!({"big": "x".repeat(MAX_SECRET_SIZE + 1)})),
            vec![": Too long: may not be more than 1048576 bytes"]
        );
        assert!(cm(json!({"big": "x".repeat(MAX_SECRET_SIZE)})).is_empty());
        assert_eq!(
            create_msgs(
                "",
                "ConfigMap",
                json!({"metadata": {"name": "c"}, "data": {"k": "v"}, "binaryData": {"k": "dg=="}})
            ),
            vec![r#"data[k]: Invalid value: "k": duplicate of key present in binaryData"#]
        );
    }

    #[test]
    fn immutable_config_maps_and_secrets() {
        let old = json!({"metadata": {"name": "c", "namespace": "default"}, "immutable": true, "data": {"k": "v"}});
        let mut new = old.clone();
        new["data"]["k"] = json!("w");
        assert_eq!(
            update_msgs("", "ConfigMap", new, old.clone()),
            vec!["data: Forbidden: field is immutable when `immutable` is set"]
        );
        let mut new = old.clone();
        new["immutable"] = json!(false);
        assert_eq!(
            update_msgs("", "ConfigMap", new, old),
            vec!["immutable: Forbidden: field is immutable when `immutable` is set"]
        );
        let old = json!({"metadata": {"name": "s", "namespace": "default"}, "data": {"k": "dg=="}});
        let mut new = old.clone();
        new["type"] = json!("kubernetes.io/basic-auth");
        new["data"] = json!({"username": "dQ=="});
        assert_eq!(
            update_msgs("", "Secret", new, old),
            vec![r#"type: Invalid value: "kubernetes.io/basic-auth": field is immutable"#]
        );
    }

    #[test]
    fn secrets() {
        let sec = |v: Value| create_msgs("", "Secret", v);
        assert_eq!(
            sec(
                json!({"metadata": {"name": "s"}, "type": "kubernetes.io/tls", "data": {"tls.crt": "eA=="}})
            ),
            vec!["data[tls.key]: Required value"]
        );
        assert_eq!(
            sec(json!({"metadata": {"name": "s"}, "type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": "bm90IGpzb24="}}))
                .len(),
            1
        );
        assert_eq!(
            sec(json!({"metadata": {"name": "s"}, "type": "kubernetes.io/service-account-token"})),
            vec!["metadata.annotations[kubernetes.io/service-account.name]: Required value"]
        );
        let big = base64_of_len(MAX_SECRET_SIZE + 1);
        assert_eq!(
            sec(json!({"metadata": {"name": "s"}, "data": {"k": big}})),
            vec!["data: Too long: may not be more than 1048576 bytes"]
        );
        // stringData counts after it is folded into data.
        assert_eq!(
            sec(json!({"metadata": {"name": "s"}, "stringData": {"bad key": "x"}})).len(),
            1
        );
        let m = sec(json!({"metadata": {"name": "s"}, "data": {"k": "!!notbase64"}}));
        assert_eq!(m.len(), 1);
        assert!(
            m[0].starts_with(r#"data.k: Invalid value: "!!notbase64""#),
            "{}",
            m[0]
        );
    }

    fn base64_of_len(n: usize) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(vec![b'x'; n])
    }

    #[test]
    fn namespaces() {
        assert_eq!(
            create_msgs(
                "",
                "Namespace",
                json!({"metadata": {"name": "a"}, "spec": {"finalizers": ["custom"]}})
            ),
            vec![
                r#"spec.finalizers: Invalid value: "custom": name is neither a standard finalizer name nor is it fully qualified"#
            ]
        );
        let info = info("", "Namespace");
        let mut ns = json!({"metadata": {"name": "a"}, "status": {"phase": "Terminating"}});
        info.default(&mut ns);
        assert_eq!(
            validate_status_update(info, &ns, &ns)[0].to_string(),
            r#"status.Phase: Invalid value: "Terminating": may only be 'Active' if `deletionTimestamp` is empty"#
        );
    }

    #[test]
    fn nodes() {
        let node = |spec: Value| {
            create_msgs(
                "",
                "Node",
                json!({"metadata": {"name": "n1"}, "spec": spec}),
            )
        };
        assert!(node(json!({"podCIDRs": ["10.244.1.0/24", "fd00::/64"], "taints": [{"key": "k", "effect": "NoSchedule"}]})).is_empty());
        assert_eq!(
            node(json!({"podCIDRs": ["10.244.1.0/33"]})),
            vec![
                r#"spec.podCIDRs[0]: Invalid value: "10.244.1.0/33": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"#
            ]
        );
        assert_eq!(
            node(json!({"podCIDRs": ["10.244.1.0/24", "10.244.2.0/24"]})),
            vec![
                r#"spec.podCIDRs: Invalid value: []string{"10.244.1.0/24", "10.244.2.0/24"}: may specify no more than one CIDR for each IP family"#
            ]
        );
        assert_eq!(
            node(json!({"taints": [{"key": "k", "effect": "Maybe"}]})),
            vec![
                r#"metadata.taints[0].effect: Unsupported value: "Maybe": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute""#
            ]
        );
        assert_eq!(
            node(json!({"taints": [{"key": "k"}]})),
            vec!["metadata.taints[0].effect: Required value"]
        );
        let m = node(
            json!({"taints": [{"key": "k", "effect": "NoSchedule"}, {"key": "k", "value": "x", "effect": "NoSchedule"}]}),
        );
        assert_eq!(m.len(), 1);
        assert!(
            m[0].starts_with("metadata.taints[1]: Duplicate value: ")
                && m[0].ends_with(": taints must be unique by key and effect pair"),
            "{}",
            m[0]
        );
        let old = json!({"metadata": {"name": "n1"}, "spec": {"podCIDRs": ["10.244.1.0/24"]}});
        let mut new = old.clone();
        new["spec"]["podCIDRs"] = json!(["10.244.9.0/24"]);
        assert_eq!(
            update_msgs("", "Node", new, old.clone()),
            vec![
                r#"spec.podCIDRs: Forbidden: node updates may not change podCIDR except from "" to valid"#
            ]
        );
        let unset = json!({"metadata": {"name": "n1"}});
        assert!(update_msgs("", "Node", old, unset).is_empty());
    }

    #[test]
    fn events() {
        let ev = |v: Value| create_msgs("", "Event", v);
        assert_eq!(
            ev(
                json!({"metadata": {"name": "e"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "other"}})
            ),
            vec![
                r#"involvedObject.namespace: Invalid value: "other": does not match event.namespace"#
            ]
        );
        // Cluster-scoped objects' events may live in default.
        assert!(
            ev(
                json!({"metadata": {"name": "e"}, "involvedObject": {"kind": "Node", "name": "n1"}})
            )
            .is_empty()
        );
        assert_eq!(
            ev(
                json!({"metadata": {"name": "e"}, "eventTime": "2026-01-01T00:00:00.000000Z", "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"}})
            ),
            vec![
                "source: Required value",
                r#"source: Invalid value: "": name part must be non-empty"#,
                r#"source: Invalid value: "": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"#,
                "reportingInstance: Required value",
                "action: Required value",
                "reason: Required value"
            ]
        );
        // Event names are only path segments.
        assert!(ev(json!({"metadata": {"name": "Web.Started_1"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"}})).is_empty());
    }

    #[test]
    fn endpoints() {
        let ep = |subsets: Value| {
            create_msgs(
                "",
                "Endpoints",
                json!({"metadata": {"name": "web"}, "subsets": subsets}),
            )
        };
        assert!(
            ep(json!([{"addresses": [{"ip": "127.0.0.2"}], "ports": [{"port": 80}]}])).is_empty()
        );
        assert_eq!(
            ep(json!([{"ports": [{"port": 80}]}])),
            vec!["subsets[0]: Required value: must specify `addresses` or `notReadyAddresses`"]
        );
        assert_eq!(
            ep(json!([{"addresses": [{"ip": "10.0.0.999"}]}])),
            vec![
                r#"subsets[0].addresses[0].ip: Invalid value: "10.0.0.999": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"#
            ]
        );
        assert_eq!(
            ep(json!([{"addresses": [{"ip": "169.254.1.1"}]}])),
            vec![
                r#"subsets[0].addresses[0].ip: Invalid value: "169.254.1.1": may not be in the link-local range (169.254.0.0/16, fe80::/10)"#
            ]
        );
        assert_eq!(
            ep(
                json!([{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}, {"port": 81, "name": "b"}]}])
            ),
            vec!["subsets[0].ports[0].name: Required value"]
        );
        assert_eq!(
            ep(json!([{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 0}]}])),
            vec![
                "subsets[0].ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive"
            ]
        );
    }

    #[test]
    fn endpoint_slices() {
        let es = |v: Value| {
            let mut obj = json!({"metadata": {"name": "web-1"}, "addressType": "IPv4", "endpoints": [], "ports": []});
            for (k, val) in v.as_object().unwrap() {
                obj[k] = val.clone();
            }
            create_msgs("discovery.k8s.io", "EndpointSlice", obj)
        };
        assert!(es(json!({"endpoints": [{"addresses": ["10.1.2.3"], "nodeName": "n1"}], "ports": [{"name": "http", "port": 80}]})).is_empty());
        assert_eq!(
            es(json!({"addressType": "IPX"})),
            vec![
                r#"addressType: Unsupported value: "IPX": supported values: "FQDN", "IPv4", "IPv6""#
            ]
        );
        assert_eq!(
            es(json!({"endpoints": [{"addresses": ["fd00::1"]}]})),
            vec![
                r#"endpoints[0].addresses[0]: Invalid value: "fd00::1": must be a valid IPv4 address"#
            ]
        );
        assert_eq!(
            es(json!({"endpoints": [{"addresses": []}]})),
            vec!["endpoints[0].addresses: Required value: must contain at least 1 address"]
        );
        assert_eq!(
            es(json!({"ports": [{"port": 80}, {"port": 81}]})),
            vec![r#"ports[1].name: Duplicate value: """#]
        );
        let addrs: Vec<String> = (0..101)
            .map(|i| format!("10.0.{}.{}", i / 200, i % 200 + 1))
            .collect();
        assert_eq!(
            es(json!({"endpoints": [{"addresses": addrs}]})),
            vec!["endpoints[0].addresses: Too many: 101: must have at most 100 items"]
        );
        let old = json!({"metadata": {"name": "web-1", "namespace": "default"}, "addressType": "IPv4", "endpoints": []});
        let mut new = old.clone();
        new["addressType"] = json!("IPv6");
        assert_eq!(
            update_msgs("discovery.k8s.io", "EndpointSlice", new, old),
            vec![r#"addressType: Invalid value: "IPv6": field is immutable"#]
        );
    }

    #[test]
    fn leases() {
        let lease = |spec: Value| {
            create_msgs(
                "coordination.k8s.io",
                "Lease",
                json!({"metadata": {"name": "l"}, "spec": spec}),
            )
        };
        assert_eq!(
            lease(json!({"leaseDurationSeconds": 0})),
            vec!["spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"]
        );
        assert_eq!(
            lease(json!({"leaseTransitions": -1})),
            vec!["spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0"]
        );
        assert_eq!(
            lease(json!({"preferredHolder": "me"})),
            vec!["spec.preferredHolder: Forbidden: may only be specified if `strategy` is defined"]
        );
    }
}
