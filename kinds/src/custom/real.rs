//! The published definitions of cert-manager and prometheus-operator (`kinds/testdata/crds/`):
//! every one passes definition validation and is served, and resources written as their users
//! write them validate, while broken ones are refused with the schema's and rules' reasons.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use crate::Kind;
use crate::builtin::custom_resource_definition::CustomResourceDefinition;

const FILES: &[&str] = &[
    "acme.cert-manager.io_challenges.yaml",
    "acme.cert-manager.io_orders.yaml",
    "cert-manager.io_certificaterequests.yaml",
    "cert-manager.io_certificates.yaml",
    "cert-manager.io_clusterissuers.yaml",
    "cert-manager.io_issuers.yaml",
    "monitoring.coreos.com_podmonitors.yaml",
    "monitoring.coreos.com_prometheuses.yaml",
    "monitoring.coreos.com_prometheusrules.yaml",
    "monitoring.coreos.com_servicemonitors.yaml",
];

fn definition(file: &str) -> Value {
    let path = crate::package_dir().join("testdata/crds").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn kind_of(file: &str) -> Arc<dyn Kind> {
    super::kinds_of(&definition(file))
        .unwrap_or_else(|e| panic!("{file}: {e:?}"))
        .into_iter()
        .next()
        .expect("a served version")
}

/// The messages of validating `object` as `kind` after decoding and defaulting it.
fn check(kind: &dyn Kind, object: Value) -> Vec<String> {
    let mut object = kind.decode(&object).expect("decodes");
    kind.default(&mut object);
    kind.validate(&object, None, &ObjectMeta::default())
        .expect("validates")
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn every_published_definition_is_valid_and_served() {
    for file in FILES {
        let mut crd = definition(file);
        CustomResourceDefinition.default(&mut crd);
        let errors = CustomResourceDefinition
            .validate(&crd, None, &ObjectMeta::default())
            .unwrap();
        assert!(errors.is_empty(), "{file}: {errors:?}");
        let kinds = super::kinds_of(&crd).unwrap();
        assert!(!kinds.is_empty(), "{file}");
        // Its OpenAPI schema is published with its group-version-kind.
        let mut generator = schemars::generate::SchemaSettings::openapi3().into_generator();
        let name = kinds[0].openapi_schema(&mut generator).unwrap();
        let schema = &generator.definitions()[&name];
        assert_eq!(
            schema["x-kubernetes-group-version-kind"][0]["kind"],
            kinds[0].info().kind,
            "{file}"
        );
    }
}

#[test]
fn cert_manager_resources_validate() {
    let issuer = kind_of("cert-manager.io_issuers.yaml");
    let self_signed = json!({
        "apiVersion": "cert-manager.io/v1", "kind": "Issuer",
        "metadata": {"name": "selfsigned", "namespace": "default"},
        "spec": {"selfSigned": {}}
    });
    assert_eq!(check(&*issuer, self_signed), Vec::<String>::new());
    // Venafi needs exactly one of tpp, cloud and ngts: a CEL rule of the published schema.
    let venafi = json!({
        "apiVersion": "cert-manager.io/v1", "kind": "Issuer",
        "metadata": {"name": "v", "namespace": "default"},
        "spec": {"venafi": {"zone": "z"}}
    });
    let errors = check(&*issuer, venafi);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with("spec.venafi: Invalid value: \"object\""),
        "{errors:?}"
    );

    let certificate = kind_of("cert-manager.io_certificates.yaml");
    let cert = json!({
        "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"secretName": "web-tls", "dnsNames": ["web.example.com"],
                 "duration": "2160h", "privateKey": {"algorithm": "ECDSA", "size": 256},
                 "issuerRef": {"name": "selfsigned", "kind": "Issuer"}}
    });
    assert_eq!(check(&*certificate, cert), Vec::<String>::new());
    let broken = json!({
        "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"dnsNames": ["web.example.com"], "privateKey": {"algorithm": "DSA"}}
    });
    let errors = check(&*certificate, broken);
    for expected in [
        "spec.issuerRef: Required value",
        "spec.secretName: Required value",
        r#"spec.privateKey.algorithm: Unsupported value: "DSA": supported values: "RSA", "ECDSA", "Ed25519""#,
    ] {
        assert!(
            errors.iter().any(|e| e == expected),
            "{expected} not in {errors:?}"
        );
    }
    let names: Vec<&str> = certificate.columns().iter().map(|c| c.name).collect();
    assert_eq!(
        names,
        vec![
            "Name",
            "Ready",
            "Secret",
            "Issuer",
            "Status",
            "Expiration",
            "Age"
        ]
    );
    let ready = json!({"metadata": {"name": "web"}, "spec": {"secretName": "web-tls", "issuerRef": {"name": "selfsigned"}},
                       "status": {"conditions": [{"type": "Issuing", "status": "False"},
                                                 {"type": "Ready", "status": "True", "message": "up to date"}]}});
    let cells = certificate
        .cells(&ready, "2026-01-01T00:00:00Z".parse().unwrap())
        .unwrap();
    assert_eq!(
        &cells[..5],
        &[
            json!("web"),
            json!("True"),
            json!("web-tls"),
            json!("selfsigned"),
            json!("up to date")
        ]
    );
}

#[test]
fn prometheus_operator_resources_validate() {
    let monitor = kind_of("monitoring.coreos.com_servicemonitors.yaml");
    let example = json!({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
        "metadata": {"name": "example-app", "namespace": "default", "labels": {"team": "frontend"}},
        "spec": {"selector": {"matchLabels": {"app": "example-app"}}, "endpoints": [{"port": "web", "interval": "30s"}]}
    });
    assert_eq!(check(&*monitor, example), Vec::<String>::new());
    let bad_interval = json!({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
        "metadata": {"name": "m", "namespace": "default"},
        "spec": {"selector": {}, "endpoints": [{"port": "web", "interval": "soon"}]}
    });
    let errors = check(&*monitor, bad_interval);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with(r#"spec.endpoints[0].interval: Invalid value: "soon": spec.endpoints[0].interval in body should match"#),
        "{errors:?}"
    );

    let prometheus = kind_of("monitoring.coreos.com_prometheuses.yaml");
    let server = json!({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
        "metadata": {"name": "prometheus", "namespace": "default"},
        "spec": {"serviceAccountName": "prometheus", "replicas": 2,
                 "serviceMonitorSelector": {"matchLabels": {"team": "frontend"}},
                 "resources": {"requests": {"memory": "400Mi"}}}
    });
    assert_eq!(check(&*prometheus, server), Vec::<String>::new());

    let rules = kind_of("monitoring.coreos.com_prometheusrules.yaml");
    let alert = json!({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
        "metadata": {"name": "errors", "namespace": "default"},
        "spec": {"groups": [{"name": "example", "rules": [
            {"alert": "HighErrors", "expr": "rate(errors_total[5m]) > 1", "for": "10m"}]}]}
    });
    assert_eq!(check(&*rules, alert), Vec::<String>::new());
}
