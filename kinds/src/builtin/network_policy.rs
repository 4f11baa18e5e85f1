//! `networking.k8s.io/v1` NetworkPolicy: which traffic may reach (ingress) or leave (egress) the
//! pods its selector picks. Served, validated, defaulted and stored as Kubernetes does it; skiff
//! does NOT enforce it (no component filters pod traffic): the proxy says so with a Warning
//! Event on each policy and the README says so plainly.

use k8s_openapi::api::networking::v1::{NetworkPolicy as Np, NetworkPolicyPeer, NetworkPolicyPort};

use super::prelude::*;
use crate::validation::apps::validate_label_selector;
use crate::validation::{FieldError, Path, decode};

/// `networking.k8s.io/v1` NetworkPolicy.
pub struct NetworkPolicy;

/// Its names, scope, verbs, subresources and selectable fields.
pub const INFO: ResourceInfo = ResourceInfo {
    group: "networking.k8s.io",
    version: "v1",
    kind: "NetworkPolicy",
    plural: "networkpolicies",
    singular: "networkpolicy",
    short_names: &["netpol"],
    namespaced: true,
    verbs: READ_WRITE,
    subresources: &[],
    categories: &[],
    selectable_fields: &[],
};

/// The reason of the Event that says a policy is stored but not enforced.
pub const NOT_ENFORCED_REASON: &str = "NetworkPolicyNotEnforced";

const PROTOCOLS: &[&str] = &["TCP", "UDP", "SCTP"];
const POLICY_TYPES: &[&str] = &["Ingress", "Egress"];

/// `SetDefaults_NetworkPolicy` and `SetDefaults_NetworkPolicyPort`, on JSON: ports without a
/// protocol are TCP; `policyTypes` when absent is `Ingress`, plus `Egress` when there are egress
/// rules.
fn default(object: &mut Value) {
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for direction in ["ingress", "egress"] {
        for rule in spec
            .get_mut(direction)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            for port in rule
                .get_mut("ports")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
                .filter_map(Value::as_object_mut)
            {
                port.entry("protocol").or_insert_with(|| json!("TCP"));
            }
        }
    }
    let unset = spec
        .get("policyTypes")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty);
    if unset {
        let egress = spec
            .get("egress")
            .and_then(Value::as_array)
            .is_some_and(|e| !e.is_empty());
        let types = if egress {
            json!(["Ingress", "Egress"])
        } else {
            json!(["Ingress"])
        };
        spec.insert("policyTypes".into(), types);
    }
}

fn validate_port(port: &NetworkPolicyPort, path: &Path, errs: &mut Vec<FieldError>) {
    if let Some(protocol) = port.protocol.as_deref()
        && !PROTOCOLS.contains(&protocol)
    {
        errs.push(FieldError::not_supported(
            path.child("protocol"),
            protocol,
            PROTOCOLS,
        ));
    }
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    match &port.port {
        Some(IntOrString::Int(n)) => {
            for m in names::port_num((*n).into()) {
                errs.push(FieldError::invalid(path.child("port"), *n, m));
            }
            if let Some(end) = port.end_port
                && end < *n
            {
                errs.push(FieldError::invalid(
                    path.child("endPort"),
                    end,
                    "must be greater than or equal to `port`",
                ));
            }
        }
        Some(IntOrString::String(name)) => {
            for m in names::port_name(name) {
                errs.push(FieldError::invalid(path.child("port"), name.as_str(), m));
            }
            if port.end_port.is_some() {
                errs.push(FieldError::invalid(
                    path.child("endPort"),
                    port.end_port.unwrap_or_default(),
                    "may not be specified when `port` is non-numeric",
                ));
            }
        }
        None => {
            if port.end_port.is_some() {
                errs.push(FieldError::invalid(
                    path.child("endPort"),
                    port.end_port.unwrap_or_default(),
                    "may not be specified when `port` is not specified",
                ));
            }
        }
    }
}

fn validate_peer(peer: &NetworkPolicyPeer, path: &Path, errs: &mut Vec<FieldError>) {
    let mut set = 0;
    if let Some(selector) = &peer.pod_selector {
        set += 1;
        errs.extend(validate_label_selector(
            selector,
            &path.child("podSelector"),
        ));
    }
    if let Some(selector) = &peer.namespace_selector {
        set += 1;
        errs.extend(validate_label_selector(
            selector,
            &path.child("namespaceSelector"),
        ));
    }
    if let Some(block) = &peer.ip_block {
        set += 1;
        let bp = path.child("ipBlock");
        let cidr = parse_cidr(&block.cidr);
        if block.cidr.is_empty() {
            errs.push(FieldError::required(bp.child("cidr"), ""));
        } else if cidr.is_none() {
            errs.push(FieldError::invalid(
                bp.child("cidr"),
                block.cidr.as_str(),
                "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            ));
        }
        for (i, except) in block.except.iter().flatten().enumerate() {
            if parse_cidr(except).is_none() {
                errs.push(FieldError::invalid(
                    bp.child("except").index(i),
                    except.as_str(),
                    "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                ));
            }
        }
    }
    if set == 0 {
        errs.push(FieldError::required(path.clone(), "must specify a peer"));
    } else if peer.ip_block.is_some() && set > 1 {
        errs.push(FieldError::forbidden(
            path.clone(),
            "may not specify more than 1 peer type",
        ));
    }
}

/// An address and a prefix length that fits it.
fn parse_cidr(text: &str) -> Option<(std::net::IpAddr, u8)> {
    let (ip, len) = text.split_once('/')?;
    let ip: std::net::IpAddr = ip.parse().ok()?;
    let len: u8 = len.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    (len <= max).then_some((ip, len))
}

fn validate(new: &Value) -> Checked {
    let np: Np = decode(new, "")?;
    let spec = np.spec.unwrap_or_default();
    let path = Path::new("spec");
    let mut errs = validate_label_selector(
        &spec.pod_selector.clone().unwrap_or_default(),
        &path.child("podSelector"),
    );
    let ingress = spec.ingress.iter().flatten().map(|r| (&r.ports, &r.from));
    let egress = spec.egress.iter().flatten().map(|r| (&r.ports, &r.to));
    let rules = ingress
        .enumerate()
        .map(|(i, r)| (path.child("ingress").index(i), "from", r))
        .chain(
            egress
                .enumerate()
                .map(|(i, r)| (path.child("egress").index(i), "to", r)),
        );
    for (rp, field, (ports, peers)) in rules {
        for (j, port) in ports.iter().flatten().enumerate() {
            validate_port(port, &rp.child("ports").index(j), &mut errs);
        }
        for (j, peer) in peers.iter().flatten().enumerate() {
            validate_peer(peer, &rp.child(field).index(j), &mut errs);
        }
    }
    let types = spec.policy_types.unwrap_or_default();
    if types.len() > POLICY_TYPES.len() {
        errs.push(FieldError::invalid(
            path.child("policyTypes"),
            json!(types),
            "may not specify more than two policyTypes",
        ));
    }
    for (i, t) in types.iter().enumerate() {
        if !POLICY_TYPES.contains(&t.as_str()) {
            errs.push(FieldError::not_supported(
                path.child("policyTypes").index(i),
                t.as_str(),
                POLICY_TYPES,
            ));
        }
    }
    Ok(errs)
}

impl Kind for NetworkPolicy {
    fn info(&self) -> &'static ResourceInfo {
        &INFO
    }

    fn decode(&self, object: &Value) -> Result<Value, String> {
        roundtrip::<Np>(object)
    }

    fn openapi_schema(&self, generator: &mut SchemaGenerator) -> Option<String> {
        Some(schema_name::<Np>(generator))
    }

    fn columns(&self) -> Vec<Column> {
        use table::{AGE, NAME, col};
        vec![
            NAME,
            col(
                "Pod-Selector",
                "string",
                "Selects the pods to which this NetworkPolicy object applies.",
            ),
            AGE,
        ]
    }

    fn cells(&self, object: &Value, now: Timestamp) -> Option<Vec<Value>> {
        let np: Np = table::typed(object)?;
        let selector = np
            .spec
            .and_then(|s| s.pod_selector)
            .map(|s| table::format_selector(&s))
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "<none>".to_string());
        Some(vec![
            json!(np.metadata.name.as_deref().unwrap_or_default()),
            json!(selector),
            table::age_of(object, now),
        ])
    }

    fn default(&self, object: &mut Value) {
        default(object);
    }

    fn strategy(&self) -> Strategy {
        Strategy::GENERATION
    }

    fn validate(&self, new: &Value, _old: Option<&Value>, _meta: &ObjectMeta) -> Checked {
        validate(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::test_util::create_msgs;

    fn np(spec: Value) -> Value {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
               "metadata": {"name": "deny", "namespace": "default"}, "spec": spec})
    }

    #[test]
    fn ports_default_to_tcp_and_policy_types_follow_the_rules() {
        let mut object = np(json!({"podSelector": {},
                                   "ingress": [{"ports": [{"port": 80}]}]}));
        NetworkPolicy.default(&mut object);
        assert_eq!(object["spec"]["ingress"][0]["ports"][0]["protocol"], "TCP");
        assert_eq!(object["spec"]["policyTypes"], json!(["Ingress"]));
        let mut object = np(json!({"podSelector": {}, "egress": [{}]}));
        NetworkPolicy.default(&mut object);
        assert_eq!(object["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        let mut object = np(json!({"podSelector": {}, "egress": [{}], "policyTypes": ["Egress"]}));
        NetworkPolicy.default(&mut object);
        assert_eq!(object["spec"]["policyTypes"], json!(["Egress"]));
    }

    #[test]
    fn peers_ports_and_types_are_checked() {
        let msgs = |spec| create_msgs("networking.k8s.io", "NetworkPolicy", np(spec));
        assert!(
            msgs(json!({"podSelector": {"matchLabels": {"app": "db"}},
                        "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}],
                                     "ports": [{"port": 5432, "endPort": 5440}]}]}))
            .is_empty()
        );
        assert_eq!(
            msgs(json!({"podSelector": {}, "ingress": [{"from": [{}]}]})),
            ["spec.ingress[0].from[0]: Required value: must specify a peer"]
        );
        assert_eq!(
            msgs(
                json!({"podSelector": {}, "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/40"}}],
                                                      "ports": [{"protocol": "ICMP"}]}]})
            ),
            [
                "spec.egress[0].ports[0].protocol: Unsupported value: \"ICMP\": supported values: \"TCP\", \"UDP\", \"SCTP\"",
                "spec.egress[0].to[0].ipBlock.cidr: Invalid value: \"10.0.0.0/40\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            ]
        );
        assert_eq!(
            msgs(json!({"podSelector": {}, "policyTypes": ["Sideways"]})),
            [
                "spec.policyTypes[0]: Unsupported value: \"Sideways\": supported values: \"Ingress\", \"Egress\""
            ]
        );
    }

    #[test]
    fn table_row_shows_the_pod_selector() {
        let object = np(json!({"podSelector": {"matchLabels": {"app": "db"}}}));
        let cells = NetworkPolicy.cells(&object, Timestamp::now()).unwrap();
        assert_eq!(cells[..2], [json!("deny"), json!("app=db")]);
        let all = np(json!({"podSelector": {}}));
        let cells = NetworkPolicy.cells(&all, Timestamp::now()).unwrap();
        assert_eq!(cells[1], json!("<none>"));
    }
}
