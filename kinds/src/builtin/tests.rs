//! Every registered kind has every piece, and each kind's selectable fields read what
//! Kubernetes' field selectors read.

use serde_json::{Value, json};
use skiff_meta::ResourceInfo;
use skiff_meta::fields::{field_value, parse, parse_for, selectable_projection, supported_fields};

use super::{all, by_kind, by_plural};

fn kind(group: &str, kind: &str) -> &'static ResourceInfo {
    by_kind(group, kind).info()
}

/// A minimal object of `info`'s kind.
fn minimal(info: &ResourceInfo) -> Value {
    let mut object = json!({
        "apiVersion": info.api_version(),
        "kind": info.kind,
        "metadata": {"name": "x", "creationTimestamp": "2026-01-01T00:00:00Z"},
    });
    if info.namespaced {
        object["metadata"]["namespace"] = json!("default");
    }
    object
}

#[test]
fn every_kind_has_every_piece() {
    let mut generator = schemars::generate::SchemaSettings::openapi3().into_generator();
    for kind in all().iter() {
        let info = kind.info();
        let name = format!("{}/{}", info.group, info.kind);
        assert!(!info.verbs.is_empty(), "{name}: verbs");
        assert!(
            !info.singular.is_empty() && !info.plural.is_empty(),
            "{name}: names"
        );
        let object = minimal(info);
        let decoded = kind
            .decode(&object)
            .unwrap_or_else(|e| panic!("{name}: decode: {e}"));
        assert_eq!(
            decoded["metadata"]["name"], "x",
            "{name}: decode keeps metadata"
        );
        let schema = kind
            .openapi_schema(&mut generator)
            .unwrap_or_else(|| panic!("{name}: no OpenAPI schema"));
        assert!(schema.contains(info.kind), "{name}: schema {schema}");
        // Columns and cells: table.rs's every_served_kind_has_matching_columns_and_cells.
        // Strategic merge patch, for those that can be patched.
        if info.verbs.contains(&"patch") {
            assert!(kind.merge_schema().is_some(), "{name}: merge schema");
        }
    }
}

#[test]
fn no_prefix_of_one_resource_contains_another() {
    // A list of `endpoints` must never see `endpointslices`: prefixes end in '/'. The versions of
    // one resource share its prefix, and so do the two APIs of Events (one store).
    let kinds = all();
    let events = |info: &ResourceInfo| info.plural == "events";
    for a in kinds {
        for b in kinds {
            let (a_info, b_info) = (a.info(), b.info());
            if (a_info.group, a_info.plural) != (b_info.group, b_info.plural)
                && !(events(a_info) && events(b_info))
            {
                assert!(
                    !b.info()
                        .storage_prefix()
                        .starts_with(&a.info().storage_prefix())
                );
            }
        }
    }
}

#[test]
fn urls_and_kinds_are_unique() {
    let kinds = all();
    for (i, a) in kinds.iter().enumerate() {
        for b in &kinds[i + 1..] {
            let (a, b) = (a.info(), b.info());
            assert!(
                (a.group, a.version, a.plural) != (b.group, b.version, b.plural),
                "{}",
                a.plural
            );
            assert!(
                (a.group, a.version, a.kind) != (b.group, b.version, b.kind),
                "{}",
                a.kind
            );
        }
    }
}

#[test]
fn groups_in_order() {
    let registry = crate::Kinds::builtin();
    let groups = registry.snapshot().groups();
    assert_eq!(groups[0], ("apps", vec!["v1"]));
    assert!(groups.iter().any(|(g, _)| *g == "coordination.k8s.io"));
}

#[test]
fn a_projection_answers_every_field_and_label_as_the_object_does() {
    let objects = [
        serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web", "tier": "1"},
                         "annotations": {"big": "x"}},
            "spec": {"nodeName": "n1", "restartPolicy": "Always", "hostNetwork": true,
                     "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                       "podIPs": [{"ip": "10.0.0.2"}, {"ip": "fd00::2"}]}
        }),
        serde_json::json!({
            "metadata": {"name": "e", "namespace": "ns"},
            "involvedObject": {"kind": "Pod", "name": "p", "uid": "u"},
            "reason": "Started", "type": "Normal", "reportingComponent": "kubelet",
            "source": {"component": ""}
        }),
        serde_json::json!({"metadata": {"name": "n"}, "spec": {"unschedulable": true}}),
        serde_json::json!({"metadata": {"name": "rs"}, "status": {"replicas": 3}}),
        serde_json::json!({"metadata": {"name": "s"}, "type": "Opaque", "data": {"k": "dg=="}}),
        serde_json::json!({"metadata": {"name": "odd", "labels": null}, "spec": null,
                           "status": {"podIP": 7}}),
    ];
    let kinds = [
        "pods",
        "events",
        "nodes",
        "secrets",
        "namespaces",
        "replicasets",
        "configmaps",
    ];
    for object in &objects {
        for resource in kinds {
            let info = by_plural(resource).info();
            let projection = selectable_projection(info, object);
            assert_eq!(
                projection.pointer("/metadata/labels"),
                object.pointer("/metadata/labels")
            );
            for field in supported_fields(info) {
                assert_eq!(
                    field_value(info, &projection, field),
                    field_value(info, object, field),
                    "{field} of {object}"
                );
            }
        }
    }
    // What no selector reads is left out.
    let pod = selectable_projection(by_plural("pods").info(), &objects[0]);
    assert!(pod.pointer("/spec/containers").is_none());
    assert!(pod.pointer("/metadata/annotations").is_none());
}

#[test]
fn pods() {
    let pods = kind("", "Pod");
    let pod = json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"nodeName": "n1", "restartPolicy": "Always", "hostNetwork": true},
        "status": {"phase": "Running", "podIP": "10.0.0.9", "podIPs": [{"ip": "10.0.0.9"}]}
    });
    let m = |s: &str| parse_for(pods, s).unwrap().matches(pods, &pod);
    assert!(m("metadata.name=web,metadata.namespace=default"));
    assert!(m("spec.nodeName=n1"));
    assert!(!m("spec.nodeName!=n1"));
    assert!(m("spec.hostNetwork=true"));
    assert!(m("status.phase=Running,status.podIP=10.0.0.9"));
    // Absent fields are their zero value.
    assert!(m("spec.schedulerName="));
    assert!(m("status.nominatedNodeName="));
    assert!(m("spec.serviceAccountName!=default"));
    let unscheduled = json!({"metadata": {"name": "p"}});
    assert!(parse("spec.nodeName=").unwrap().matches(pods, &unscheduled));
    assert!(
        parse("spec.hostNetwork=false")
            .unwrap()
            .matches(pods, &unscheduled)
    );
    assert!(
        parse("metadata.namespace=")
            .unwrap()
            .matches(pods, &unscheduled)
    );
    assert!(!parse("bogus=").unwrap().matches(pods, &unscheduled));
}

#[test]
fn events_as_kubectl_describe_selects_them() {
    let events = kind("", "Event");
    let ev = json!({
        "metadata": {"name": "nginx.1", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "nginx", "namespace": "default", "uid": "u-1"},
        "reason": "Scheduled", "type": "Normal", "reportingComponent": "default-scheduler"
    });
    let sel = parse_for(
        events,
        "involvedObject.uid=u-1,involvedObject.name=nginx,involvedObject.namespace=default",
    )
    .unwrap();
    assert!(sel.matches(events, &ev));
    assert!(
        !parse("involvedObject.uid=u-2")
            .unwrap()
            .matches(events, &ev)
    );
    // `source` falls back to the reporting controller when source.component is empty.
    assert!(
        parse("source=default-scheduler")
            .unwrap()
            .matches(events, &ev)
    );
    let kubelet = json!({"source": {"component": "kubelet"}, "reportingComponent": "x"});
    assert!(parse("source=kubelet").unwrap().matches(events, &kubelet));
    for f in [
        "involvedObject.kind",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "type",
    ] {
        assert!(supported_fields(events).contains(&f), "{f}");
    }
}

#[test]
fn other_kinds() {
    let nodes = kind("", "Node");
    assert!(
        parse_for(nodes, "spec.unschedulable=false")
            .unwrap()
            .matches(nodes, &json!({"spec": {}}))
    );
    assert!(
        parse("spec.unschedulable=true")
            .unwrap()
            .matches(nodes, &json!({"spec": {"unschedulable": true}}))
    );
    let secrets = kind("", "Secret");
    assert!(
        parse_for(secrets, "type=kubernetes.io/service-account-token")
            .unwrap()
            .matches(
                secrets,
                &json!({"type": "kubernetes.io/service-account-token"})
            )
    );
    let ns = kind("", "Namespace");
    assert!(
        parse_for(ns, "status.phase=Active")
            .unwrap()
            .matches(ns, &json!({"status": {"phase": "Active"}}))
    );
    let rs = kind("apps", "ReplicaSet");
    assert!(
        parse_for(rs, "status.replicas=0")
            .unwrap()
            .matches(rs, &json!({"status": {}}))
    );
    assert!(
        parse("status.replicas=3")
            .unwrap()
            .matches(rs, &json!({"status": {"replicas": 3}}))
    );
    assert!(parse_for(kind("apps", "Deployment"), "status.replicas=0").is_err());
    assert_eq!(
        supported_fields(kind("", "ConfigMap")),
        vec!["metadata.name", "metadata.namespace"]
    );
}
