//! Service rules (`ValidateService`, `ValidateServiceUpdate`): ports, types, session affinity,
//! cluster IPs and IP families. NodePort ranges and allocation are admission's business.

use std::collections::HashSet;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

use super::meta::validate_labels;
use super::{FieldError, Path};
use super::{decode, names, s};

const PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];
const TYPES: &[&str] = &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
const MAX_CLIENT_IP_AFFINITY_SECONDS: i32 = 86400;
const KUBELET_PORT: i32 = 10250;
const VALID_IP: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";

pub(crate) fn validate(new: &Value, old: Option<&Value>) -> Result<Vec<FieldError>, FieldError> {
    let svc: Service = decode(new, "")?;
    let spec = svc.spec.unwrap_or_default();
    let mut errs = Vec::new();
    if let Some(old) = old {
        let old: Service = decode(old, "")?;
        errs.extend(validate_cluster_ip_changes(
            &spec,
            &old.spec.unwrap_or_default(),
        ));
    }
    errs.extend(validate_spec(&spec));
    Ok(errs)
}

fn is_headless(spec: &ServiceSpec) -> bool {
    s(&spec.cluster_ip) == "None"
}

fn validate_spec(spec: &ServiceSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let sp = Path::new("spec");
    let ports = spec.ports.as_deref().unwrap_or_default();
    let ty = s(&spec.type_);
    let cluster_ips = spec.cluster_ips.as_deref().unwrap_or_default();
    if ports.is_empty() && !is_headless(spec) && ty != "ExternalName" {
        errs.push(FieldError::required(sp.child("ports"), ""));
    }
    match ty {
        "LoadBalancer" => {
            if is_headless(spec) {
                errs.push(FieldError::invalid(
                    sp.child("clusterIPs").index(0),
                    cluster_ips.first().map(String::as_str).unwrap_or("None"),
                    "may not be set to 'None' for LoadBalancer services",
                ));
            }
            for (i, p) in ports.iter().enumerate() {
                if p.port == KUBELET_PORT {
                    errs.push(FieldError::invalid(
                        sp.child("ports").index(i),
                        p.port,
                        format!("may not expose port {KUBELET_PORT} externally since it is used by kubelet"),
                    ));
                }
            }
        }
        "NodePort" if is_headless(spec) => {
            errs.push(FieldError::invalid(
                sp.child("clusterIPs").index(0),
                cluster_ips.first().map(String::as_str).unwrap_or("None"),
                "may not be set to 'None' for NodePort services",
            ));
        }
        "ExternalName" => {
            if !cluster_ips.is_empty() {
                errs.push(FieldError::forbidden(
                    sp.child("clusterIPs"),
                    "may not be set for ExternalName services",
                ));
            }
            if spec.ip_families.as_ref().is_some_and(|f| !f.is_empty()) {
                errs.push(FieldError::forbidden(
                    sp.child("ipFamilies"),
                    "may not be set for ExternalName services",
                ));
            }
            if spec.ip_family_policy.is_some() {
                errs.push(FieldError::forbidden(
                    sp.child("ipFamilyPolicy"),
                    "may not be set for ExternalName services",
                ));
            }
            let cname = s(&spec.external_name);
            let cname = cname.strip_suffix('.').unwrap_or(cname);
            if cname.is_empty() {
                errs.push(FieldError::required(sp.child("externalName"), ""));
            } else {
                for msg in names::dns1123_subdomain(cname) {
                    errs.push(FieldError::invalid(sp.child("externalName"), cname, msg));
                }
            }
        }
        _ => {}
    }
    let mut port_names = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        errs.extend(validate_service_port(
            p,
            ports.len() > 1,
            &mut port_names,
            &sp.child("ports").index(i),
        ));
    }
    if spec.selector.is_some() {
        errs.extend(validate_labels(
            spec.selector.as_ref(),
            &sp.child("selector"),
        ));
    }
    let affinity = s(&spec.session_affinity);
    if affinity.is_empty() {
        errs.push(FieldError::required(sp.child("sessionAffinity"), ""));
    } else if affinity != "ClientIP" && affinity != "None" {
        errs.push(FieldError::not_supported(
            sp.child("sessionAffinity"),
            affinity,
            &["ClientIP", "None"],
        ));
    }
    let cfg_path = sp.child("sessionAffinityConfig");
    if affinity == "ClientIP" {
        let when = "when session affinity type is ClientIP";
        match &spec.session_affinity_config {
            None => errs.push(FieldError::required(cfg_path, when)),
            Some(cfg) => match &cfg.client_ip {
                None => errs.push(FieldError::required(cfg_path.child("clientIP"), when)),
                Some(cip) => match cip.timeout_seconds {
                    None => errs.push(FieldError::required(
                        cfg_path.child("clientIP").child("timeoutSeconds"),
                        when,
                    )),
                    Some(t) if t <= 0 || t > MAX_CLIENT_IP_AFFINITY_SECONDS => {
                        errs.push(FieldError::invalid(
                            cfg_path.child("clientIP").child("timeoutSeconds"),
                            t,
                            format!("must be greater than 0 and less than {MAX_CLIENT_IP_AFFINITY_SECONDS}"),
                        ))
                    }
                    Some(_) => {}
                },
            },
        }
    } else if affinity == "None" && spec.session_affinity_config.is_some() {
        errs.push(FieldError::forbidden(
            cfg_path,
            "must not be set when session affinity is None",
        ));
    }
    errs.extend(validate_cluster_ips(spec));
    for (i, ip) in spec.external_ips.iter().flatten().enumerate() {
        if ip.parse::<IpAddr>().is_err() {
            errs.push(FieldError::invalid(
                sp.child("externalIPs").index(i),
                ip.as_str(),
                VALID_IP,
            ));
        }
    }
    if ty.is_empty() {
        errs.push(FieldError::required(sp.child("type"), ""));
    } else if !TYPES.contains(&ty) {
        errs.push(FieldError::not_supported(sp.child("type"), ty, TYPES));
    }
    if ty == "ClusterIP" {
        for (i, p) in ports.iter().enumerate() {
            if p.node_port.unwrap_or(0) != 0 {
                errs.push(FieldError::forbidden(
                    sp.child("ports").index(i).child("nodePort"),
                    "may not be used when `type` is 'ClusterIP'",
                ));
            }
        }
    }
    let mut node_ports = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let np = p.node_port.unwrap_or(0);
        if np == 0 {
            continue;
        }
        if !node_ports.insert((s(&p.protocol).to_string(), np)) {
            errs.push(FieldError::duplicate(
                sp.child("ports").index(i).child("nodePort"),
                np,
            ));
        }
    }
    let mut seen = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        if !seen.insert((s(&p.protocol).to_string(), p.port)) {
            errs.push(FieldError::duplicate(
                sp.child("ports").index(i),
                json!({"port": p.port, "protocol": s(&p.protocol)}),
            ));
        }
    }
    if let Some(policy) = spec.internal_traffic_policy.as_deref() {
        if policy != "Cluster" && policy != "Local" {
            errs.push(FieldError::not_supported(
                sp.child("internalTrafficPolicy"),
                policy,
                &["Cluster", "Local"],
            ));
        }
    } else if matches!(ty, "ClusterIP" | "NodePort" | "LoadBalancer") {
        errs.push(FieldError::required(
            sp.child("internalTrafficPolicy"),
            "must be specified",
        ));
    }
    let externally_accessible = matches!(ty, "LoadBalancer" | "NodePort")
        || (ty == "ClusterIP"
            && spec
                .external_ips
                .as_ref()
                .is_some_and(|ips| !ips.is_empty()));
    let etp = s(&spec.external_traffic_policy);
    if !externally_accessible {
        if !etp.is_empty() {
            errs.push(FieldError::invalid(
                sp.child("externalTrafficPolicy"),
                etp,
                "may only be set for externally-accessible services",
            ));
        }
    } else if etp.is_empty() {
        errs.push(FieldError::required(sp.child("externalTrafficPolicy"), ""));
    } else if etp != "Cluster" && etp != "Local" {
        errs.push(FieldError::not_supported(
            sp.child("externalTrafficPolicy"),
            etp,
            &["Cluster", "Local"],
        ));
    }
    errs
}

fn validate_service_port(
    p: &ServicePort,
    require_name: bool,
    names_seen: &mut HashSet<String>,
    path: &Path,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = s(&p.name);
    if require_name && name.is_empty() {
        errs.push(FieldError::required(path.child("name"), ""));
    } else if !name.is_empty() {
        for msg in names::dns1123_label(name) {
            errs.push(FieldError::invalid(path.child("name"), name, msg));
        }
        if !names_seen.insert(name.to_string()) {
            errs.push(FieldError::duplicate(path.child("name"), name));
        }
    }
    for msg in names::port_num(i64::from(p.port)) {
        errs.push(FieldError::invalid(path.child("port"), p.port, msg));
    }
    let protocol = s(&p.protocol);
    if protocol.is_empty() {
        errs.push(FieldError::required(path.child("protocol"), ""));
    } else if !PROTOCOLS.contains(&protocol) {
        errs.push(FieldError::not_supported(
            path.child("protocol"),
            protocol,
            PROTOCOLS,
        ));
    }
    match &p.target_port {
        Some(IntOrString::Int(n)) => {
            for msg in names::port_num(i64::from(*n)) {
                errs.push(FieldError::invalid(path.child("targetPort"), *n, msg));
            }
        }
        Some(IntOrString::String(n)) => {
            for msg in names::port_name(n) {
                errs.push(FieldError::invalid(
                    path.child("targetPort"),
                    n.as_str(),
                    msg,
                ));
            }
        }
        None => {
            for msg in names::port_num(0) {
                errs.push(FieldError::invalid(path.child("targetPort"), 0, msg));
            }
        }
    }
    if let Some(app) = &p.app_protocol {
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

/// `ValidateServiceClusterIPsRelatedFields`.
fn validate_cluster_ips(spec: &ServiceSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if s(&spec.type_) == "ExternalName" {
        return errs;
    }
    let path = Path::new("spec").child("clusterIPs");
    let ips = spec.cluster_ips.as_deref().unwrap_or_default();
    let ips_value = Value::from(ips.to_vec());
    let cluster_ip = s(&spec.cluster_ip);
    if !cluster_ip.is_empty() {
        if ips.is_empty() {
            errs.push(FieldError::required(path.clone(), ""));
        } else if ips[0] != cluster_ip {
            errs.push(FieldError::invalid(
                path.clone(),
                ips_value.clone(),
                "first value must match `clusterIP`",
            ));
        }
    } else if !ips.is_empty() {
        errs.push(FieldError::invalid(
            path.clone(),
            ips_value.clone(),
            "must be empty when `clusterIP` is not specified",
        ));
    }
    let families_path = Path::new("spec").child("ipFamilies");
    let mut seen = HashSet::new();
    for (i, fam) in spec.ip_families.iter().flatten().enumerate() {
        if fam != "IPv4" && fam != "IPv6" {
            errs.push(FieldError::not_supported(
                families_path.index(i),
                fam.as_str(),
                &["IPv4", "IPv6"],
            ));
        }
        if !seen.insert(fam.as_str()) {
            errs.push(FieldError::duplicate(families_path.index(i), fam.as_str()));
        }
    }
    if let Some(policy) = spec.ip_family_policy.as_deref() {
        let supported = ["PreferDualStack", "RequireDualStack", "SingleStack"];
        if !supported.contains(&policy) {
            errs.push(FieldError::not_supported(
                Path::new("spec").child("ipFamilyPolicy"),
                policy,
                &supported,
            ));
        }
    }
    for (i, ip) in ips.iter().enumerate() {
        if i == 0 && ip == "None" {
            if ips.len() > 1 {
                errs.push(FieldError::invalid(
                    path.clone(),
                    ips_value.clone(),
                    "'None' must be the first and only value",
                ));
            }
            continue;
        }
        if ip.parse::<IpAddr>().is_err() {
            errs.push(FieldError::invalid(path.index(i), ip.as_str(), VALID_IP));
        }
    }
    if ips.len() > 2 {
        errs.push(FieldError::invalid(
            path,
            ips_value,
            "may only hold up to 2 values",
        ));
    }
    errs
}

/// `validateUpgradeDowngradeClusterIPs`: allocated cluster IPs may not change.
fn validate_cluster_ip_changes(new: &ServiceSpec, old: &ServiceSpec) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if s(&new.type_) == "ExternalName" || s(&old.type_) == "ExternalName" {
        return errs;
    }
    if is_headless(new) && is_headless(old) {
        return errs;
    }
    let path = Path::new("spec").child("clusterIPs");
    let n = new.cluster_ips.as_deref().unwrap_or_default();
    let o = old.cluster_ips.as_deref().unwrap_or_default();
    let n_value = Value::from(n.to_vec());
    if n.len() == o.len() {
        for (i, ip) in o.iter().enumerate() {
            if ip != &n[i] {
                errs.push(FieldError::invalid(
                    path.index(i),
                    n_value.clone(),
                    "may not change once set",
                ));
            }
        }
    } else if o.len() > n.len() {
        if n.is_empty() {
            errs.push(FieldError::invalid(
                path.index(0),
                n_value.clone(),
                "primary clusterIP can not be unset",
            ));
        }
        if !o.is_empty() && !n.is_empty() && n[0] != o[0] {
            errs.push(FieldError::invalid(
                path.index(0),
                n_value.clone(),
                "may not change once set",
            ));
        }
        if n.len() == 1 && new.ip_family_policy.as_deref() != Some("SingleStack") {
            errs.push(FieldError::invalid(
                path.index(0),
                n_value,
                "`ipFamilyPolicy` must be set to 'SingleStack' when releasing the secondary clusterIP",
            ));
        }
    } else if !o.is_empty() && n[0] != o[0] {
        errs.push(FieldError::invalid(
            path.index(0),
            n_value,
            "may not change once set",
        ));
    }
    errs
}

pub(crate) fn validate_service_status(new: &Value) -> Result<Vec<FieldError>, FieldError> {
    let svc: Service = decode(new, "")?;
    let mut errs = Vec::new();
    let ingress = svc
        .status
        .and_then(|s| s.load_balancer)
        .and_then(|lb| lb.ingress)
        .unwrap_or_default();
    for (i, ing) in ingress.iter().enumerate() {
        let p = Path::new("status")
            .child("loadBalancer")
            .child("ingress")
            .index(i);
        if let Some(ip) = ing.ip.as_deref().filter(|ip| !ip.is_empty())
            && ip.parse::<IpAddr>().is_err()
        {
            errs.push(FieldError::invalid(p.child("ip"), ip, VALID_IP));
        }
        if let Some(host) = ing.hostname.as_deref().filter(|h| !h.is_empty()) {
            for msg in names::dns1123_subdomain(host) {
                errs.push(FieldError::invalid(p.child("hostname"), host, msg));
            }
        }
    }
    Ok(errs)
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use serde_json::{Value, json};

    fn svc(spec: Value) -> Value {
        json!({"metadata": {"name": "web"}, "spec": spec})
    }

    fn msgs(spec: Value) -> Vec<String> {
        create_msgs("", "Service", svc(spec))
    }

    #[test]
    fn ports_required_unless_headless_or_external_name() {
        assert_eq!(msgs(json!({})), vec!["spec.ports: Required value"]);
        assert!(msgs(json!({"clusterIP": "None", "clusterIPs": ["None"]})).is_empty());
        assert!(
            msgs(json!({"type": "ExternalName", "externalName": "db.example.com."})).is_empty()
        );
        assert_eq!(
            msgs(json!({"type": "ExternalName"})),
            vec!["spec.externalName: Required value"]
        );
    }

    #[test]
    fn port_rules() {
        assert_eq!(
            msgs(json!({"ports": [{"port": 80}, {"port": 443}]})),
            vec![
                "spec.ports[0].name: Required value",
                "spec.ports[1].name: Required value"
            ]
        );
        assert_eq!(
            msgs(json!({"ports": [{"port": 80, "name": "web"}, {"port": 443, "name": "web"}]})),
            vec![r#"spec.ports[1].name: Duplicate value: "web""#]
        );
        assert_eq!(
            msgs(json!({"ports": [{"port": 0}]})),
            vec![
                "spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive",
                "spec.ports[0].targetPort: Invalid value: 0: must be between 1 and 65535, inclusive"
            ]
        );
        assert!(msgs(json!({"ports": [{"port": 80, "targetPort": "http"}]})).is_empty());
        assert_eq!(
            msgs(json!({"ports": [{"port": 80, "targetPort": "http_1"}]})),
            vec![
                r#"spec.ports[0].targetPort: Invalid value: "http_1": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"#
            ]
        );
        assert_eq!(
            msgs(json!({"ports": [{"port": 80, "protocol": "ICMP"}]})),
            vec![
                r#"spec.ports[0].protocol: Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP""#
            ]
        );
        assert_eq!(
            msgs(json!({"ports": [{"port": 80, "name": "a"}, {"port": 80, "name": "b"}]})),
            vec![r#"spec.ports[1]: Duplicate value: {"port":80,"protocol":"TCP"}"#]
        );
        assert_eq!(
            msgs(json!({"ports": [{"port": 80, "nodePort": 30080}]})),
            vec!["spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"]
        );
    }

    #[test]
    fn types_and_affinity() {
        assert_eq!(
            msgs(json!({"type": "Internal", "ports": [{"port": 80}]})),
            vec![
                r#"spec.type: Unsupported value: "Internal": supported values: "ClusterIP", "ExternalName", "LoadBalancer", "NodePort""#
            ]
        );
        assert_eq!(
            msgs(json!({"sessionAffinity": "Cookie", "ports": [{"port": 80}]})),
            vec![
                r#"spec.sessionAffinity: Unsupported value: "Cookie": supported values: "ClientIP", "None""#
            ]
        );
        assert!(msgs(json!({"sessionAffinity": "ClientIP", "ports": [{"port": 80}]})).is_empty());
        assert_eq!(
            msgs(
                json!({"sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 0}}, "ports": [{"port": 80}]})
            ),
            vec![
                "spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 0: must be greater than 0 and less than 86400"
            ]
        );
        assert_eq!(
            msgs(json!({"selector": {"app": "-x"}, "ports": [{"port": 80}]})).len(),
            1
        );
    }

    #[test]
    fn external_traffic_policy() {
        assert_eq!(
            msgs(json!({"externalTrafficPolicy": "Local", "ports": [{"port": 80}]})),
            vec![
                r#"spec.externalTrafficPolicy: Invalid value: "Local": may only be set for externally-accessible services"#
            ]
        );
        assert!(msgs(json!({"type": "NodePort", "externalTrafficPolicy": "Local", "ports": [{"port": 80}]})).is_empty());
        assert_eq!(
            msgs(
                json!({"type": "NodePort", "externalTrafficPolicy": "Global", "ports": [{"port": 80}]})
            ),
            vec![
                r#"spec.externalTrafficPolicy: Unsupported value: "Global": supported values: "Cluster", "Local""#
            ]
        );
    }

    #[test]
    fn cluster_ips() {
        assert!(msgs(json!({"clusterIP": "10.96.0.10", "ports": [{"port": 53}]})).is_empty());
        assert_eq!(
            msgs(
                json!({"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.11"], "ports": [{"port": 53}]})
            ),
            vec![
                r#"spec.clusterIPs: Invalid value: []string{"10.96.0.11"}: first value must match `clusterIP`"#
            ]
        );
        assert_eq!(
            msgs(json!({"clusterIP": "10.96.0.300", "ports": [{"port": 53}]})),
            vec![
                r#"spec.clusterIPs[0]: Invalid value: "10.96.0.300": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"#
            ]
        );
        assert_eq!(
            msgs(json!({"type": "NodePort", "clusterIP": "None", "ports": [{"port": 80}]})),
            vec![
                r#"spec.clusterIPs[0]: Invalid value: "None": may not be set to 'None' for NodePort services"#
            ]
        );
    }

    #[test]
    fn cluster_ip_is_immutable() {
        let old = json!({"metadata": {"name": "web", "namespace": "default"}, "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}});
        let mut new = old.clone();
        new["spec"]["clusterIP"] = json!("10.96.0.11");
        new["spec"]["clusterIPs"] = json!(["10.96.0.11"]);
        assert_eq!(
            update_msgs("", "Service", new, old.clone()),
            vec![
                r#"spec.clusterIPs[0]: Invalid value: []string{"10.96.0.11"}: may not change once set"#
            ]
        );
        let mut new = old.clone();
        new["spec"]["ports"] = json!([{"port": 8080}]);
        assert!(update_msgs("", "Service", new, old).is_empty());
    }
}
