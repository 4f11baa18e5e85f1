//! Tests of [`decode`](super::decode) against real kubectl bodies, the special types, and
//! arbitrary input.

use serde_json::{Value, json};

use super::*;

/// Fixture bodies: what kubectl 1.32 and 1.33 POST for a command (`<name>.v1_3X.pb`), and what
/// the same command prints with `--dry-run=client -o json` (`<name>.v1_3X.json`). Recorded by
/// `tools/capture-kubectl-fixtures.sh`.
const FIXTURES: &[&str] = &[
    "namespace",
    "configmap",
    "secret",
    "secret-docker",
    "deployment",
    "deployment-zero",
    "service-clusterip",
    "service-nodeport",
    "service-headless",
    "serviceaccount",
    "job",
    // Kinds the API server does not serve, for more of the table.
    "cronjob",
    "ingress",
    "pdb",
    "quota",
    "role",
    "rolebinding",
    "priorityclass",
];

fn fixture(name: &str, ext: &str) -> Vec<u8> {
    let path = crate::package_dir().join(format!("testdata/protobuf/{name}.{ext}"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn kubectl_bodies_decode_to_the_json_kubectl_prints() {
    for name in FIXTURES {
        for version in ["v1_32", "v1_33"] {
            let body = fixture(name, &format!("{version}.pb"));
            let want: Value =
                serde_json::from_slice(&fixture(name, &format!("{version}.json"))).unwrap();
            let got = decode(&body).unwrap_or_else(|e| panic!("{name} {version}: {e}"));
            assert_eq!(
                got,
                want,
                "{name} {version}:\n got {}\nwant {}",
                serde_json::to_string_pretty(&got).unwrap(),
                serde_json::to_string_pretty(&want).unwrap()
            );
        }
    }
}

#[test]
fn kubectl_create_token_decodes_to_a_token_request() {
    // `create token` has no --dry-run, so this is the JSON Go's encoding gives for the object, by
    // its field tags: status.token has no omitempty (""), status.expirationTimestamp is a zero
    // Time (null).
    let want = json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "metadata": {"creationTimestamp": null},
        "spec": {
            "audiences": ["api"],
            "expirationSeconds": 3600,
            "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p", "uid": "u-1"}
        },
        "status": {"token": "", "expirationTimestamp": null}
    });
    for version in ["v1_32", "v1_33"] {
        let got = decode(&fixture("token", &format!("{version}.pb"))).unwrap();
        assert_eq!(got, want, "{version}");
    }
}

#[test]
fn kubectl_drain_delete_options_decode() {
    // `kubectl drain` without an eviction subresource DELETEs each pod with its typed client, the
    // DeleteOptions as protobuf. No dry-run prints these, so the JSON is spelled out: Go's
    // encoding of the options drain builds (a nil gracePeriodSeconds pointer is left out, a 0
    // is kept).
    let cases = [
        (
            "deleteoptions-empty",
            json!({"apiVersion": "v1", "kind": "DeleteOptions"}),
        ),
        (
            "deleteoptions-grace0",
            json!({"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}),
        ),
        (
            "deleteoptions-dryrun",
            json!({"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 5,
                   "dryRun": ["All"]}),
        ),
    ];
    for (name, want) in cases {
        for version in ["v1_32", "v1_33"] {
            let got = decode(&fixture(name, &format!("{version}.pb")))
                .unwrap_or_else(|e| panic!("{name} {version}: {e}"));
            assert_eq!(got, want, "{name} {version}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A minimal protobuf encoder for hand-built bodies.
// ---------------------------------------------------------------------------------------------

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A length-delimited field.
fn ld(tag: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    varint(u64::from(tag) << 3 | 2, &mut out);
    varint(payload.len() as u64, &mut out);
    out.extend_from_slice(payload);
    out
}

/// A varint field.
fn vi(tag: u32, v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    varint(u64::from(tag) << 3, &mut out);
    varint(v, &mut out);
    out
}

fn s(tag: u32, text: &str) -> Vec<u8> {
    ld(tag, text.as_bytes())
}

fn msg(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.concat()
}

/// A map entry field.
fn entry(tag: u32, key: &str, value: Vec<u8>) -> Vec<u8> {
    ld(tag, &msg(&[s(1, key), value]))
}

/// `k8s\0` + runtime.Unknown around `raw`.
fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let type_meta = msg(&[s(1, api_version), s(2, kind)]);
    let mut body = MAGIC.to_vec();
    body.extend(msg(&[ld(1, &type_meta), ld(2, raw), s(3, ""), s(4, "")]));
    body
}

fn meta(name: &str) -> Vec<u8> {
    ld(1, &s(1, name))
}

// ---------------------------------------------------------------------------------------------
// Special types
// ---------------------------------------------------------------------------------------------

/// A Service whose single port has `targetPort` = `target` (the encoded IntOrString, if any).
fn service_port(target: Option<Vec<u8>>) -> Value {
    let mut port = msg(&[s(1, "p"), vi(3, 80)]);
    if let Some(target) = target {
        port.extend(ld(4, &target));
    }
    let spec = ld(1, &port);
    let body = envelope("v1", "Service", &msg(&[meta("s"), ld(2, &spec)]));
    decode(&body).unwrap()["spec"]["ports"][0].clone()
}

#[test]
fn int_or_string_is_a_number_or_a_string() {
    assert_eq!(
        service_port(Some(msg(&[vi(1, 0), vi(2, 8080), s(3, "")]))),
        json!({"name": "p", "port": 80, "targetPort": 8080})
    );
    assert_eq!(
        service_port(Some(msg(&[vi(1, 1), vi(2, 0), s(3, "http")]))),
        json!({"name": "p", "port": 80, "targetPort": "http"})
    );
    // A Go struct value: written even when absent, as its zero (0).
    assert_eq!(
        service_port(None),
        json!({"name": "p", "port": 80, "targetPort": 0})
    );
}

#[test]
fn quantities_are_strings() {
    let limits = msg(&[
        entry(1, "cpu", ld(2, &s(1, "500m"))),
        entry(1, "memory", ld(2, &s(1, "64Mi"))),
        entry(2, "cpu", ld(2, &[])),
    ]);
    let container = msg(&[s(1, "c"), ld(8, &limits)]);
    let body = envelope("v1", "Pod", &msg(&[meta("p"), ld(2, &ld(2, &container))]));
    let got = decode(&body).unwrap();
    assert_eq!(
        got["spec"]["containers"][0]["resources"],
        json!({"limits": {"cpu": "500m", "memory": "64Mi"}, "requests": {"cpu": "0"}})
    );
}

#[test]
fn times_are_rfc3339_seconds_and_null_when_unset() {
    let object_meta = msg(&[
        s(1, "n"),
        // Go keeps whole seconds of a Time.
        ld(8, &msg(&[vi(1, 1_704_164_645), vi(2, 999)])),
        // A pointer Time at the epoch is written, not dropped.
        ld(9, &msg(&[vi(1, 0), vi(2, 0)])),
    ]);
    let got = decode(&envelope("v1", "ConfigMap", &ld(1, &object_meta))).unwrap();
    assert_eq!(
        got,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": "n",
            "creationTimestamp": "2024-01-02T03:04:05Z",
            "deletionTimestamp": "1970-01-01T00:00:00Z"}})
    );
    // An empty Time (what Go writes for the zero value) and Go's zero instant are null.
    let zero = (-62_135_596_800i64) as u64;
    for time in [vec![], msg(&[vi(1, zero), vi(2, 0)])] {
        let object_meta = msg(&[s(1, "n"), ld(8, &time)]);
        let got = decode(&envelope("v1", "ConfigMap", &ld(1, &object_meta))).unwrap();
        assert_eq!(got["metadata"]["creationTimestamp"], Value::Null);
    }
}

#[test]
fn times_beyond_year_9999_are_rejected() {
    let object_meta = msg(&[s(1, "n"), ld(8, &vi(1, 253_402_300_800))]);
    let err = decode(&envelope("v1", "ConfigMap", &ld(1, &object_meta))).unwrap_err();
    assert!(
        matches!(
            err,
            Error::TimeOutOfRange {
                field: "creationTimestamp",
                seconds: 253_402_300_800,
                ..
            }
        ),
        "{err}"
    );
    let spec = ld(3, &msg(&[vi(1, u64::MAX >> 1)]));
    let err = decode(&envelope("coordination.k8s.io/v1", "Lease", &ld(2, &spec))).unwrap_err();
    assert!(
        matches!(
            err,
            Error::TimeOutOfRange {
                field: "acquireTime",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn micro_times_keep_microseconds() {
    let spec = msg(&[
        s(1, "holder"),
        ld(3, &msg(&[vi(1, 1_704_164_645), vi(2, 123_456_789)])),
        ld(4, &msg(&[vi(1, 0), vi(2, 999)])),
    ]);
    let body = envelope(
        "coordination.k8s.io/v1",
        "Lease",
        &msg(&[meta("l"), ld(2, &spec)]),
    );
    assert_eq!(
        decode(&body).unwrap()["spec"],
        json!({
            "holderIdentity": "holder",
            "acquireTime": "2024-01-02T03:04:05.123456Z",
            "renewTime": "1970-01-01T00:00:00.000000Z"
        })
    );
}

#[test]
fn raw_extensions_embed_json_or_a_nested_protobuf_object() {
    let revision = |data: &[u8]| {
        envelope(
            "apps/v1",
            "ControllerRevision",
            &msg(&[meta("r"), ld(2, &ld(1, data)), vi(3, 7)]),
        )
    };
    let got = decode(&revision(br#"{"spec":{"x":[1,2]}}"#)).unwrap();
    assert_eq!(got["data"], json!({"spec": {"x": [1, 2]}}));
    assert_eq!(got["revision"], json!(7));

    let nested = envelope("v1", "Namespace", &meta("inner"));
    let got = decode(&revision(&nested)).unwrap();
    assert_eq!(got["data"]["kind"], json!("Namespace"));
    assert_eq!(got["data"]["metadata"]["name"], json!("inner"));

    // Absent data: Go's RawExtension with nil Raw is `null`.
    let body = envelope("apps/v1", "ControllerRevision", &meta("r"));
    assert_eq!(decode(&body).unwrap()["data"], Value::Null);

    let err = decode(&revision(b"{not json")).unwrap_err();
    assert!(
        matches!(err, Error::InvalidEmbeddedJson { field: "data", .. }),
        "{err}"
    );
}

#[test]
fn managed_fields_embed_fields_v1_json() {
    let entry = msg(&[
        s(1, "kubectl"),
        s(2, "Update"),
        s(3, "v1"),
        ld(4, &msg(&[vi(1, 1_704_164_645)])),
        s(6, "FieldsV1"),
        ld(7, &ld(1, br#"{"f:data":{"f:a":{}}}"#)),
    ]);
    let object_meta = msg(&[s(1, "n"), ld(17, &entry)]);
    let got = decode(&envelope("v1", "ConfigMap", &ld(1, &object_meta))).unwrap();
    assert_eq!(
        got["metadata"]["managedFields"],
        json!([{
            "manager": "kubectl",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2024-01-02T03:04:05Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:a": {}}}
        }])
    );
}

#[test]
fn named_string_slices_are_arrays() {
    let user = msg(&[
        s(1, "alice"),
        entry(4, "scopes", msg(&[ld(2, &msg(&[s(1, "a"), s(1, "b")]))])),
    ]);
    let status = msg(&[vi(1, 1), ld(2, &user)]);
    let body = envelope(
        "authentication.k8s.io/v1",
        "TokenReview",
        &msg(&[meta("t"), ld(3, &status)]),
    );
    assert_eq!(
        decode(&body).unwrap()["status"],
        json!({"authenticated": true, "user": {"username": "alice", "extra": {"scopes": ["a", "b"]}}})
    );
}

// ---------------------------------------------------------------------------------------------
// Presence: what Go's JSON encoding keeps and drops
// ---------------------------------------------------------------------------------------------

#[test]
fn zero_values_follow_go_omitempty_and_pointers() {
    // Non-pointer omitempty scalars present as zero are dropped (hostNetwork false, image "");
    // pointers keep zero (terminationGracePeriodSeconds 0); fields without omitempty are kept
    // (container name ""); struct values are written even when absent (resources {}, status {}).
    let container = msg(&[s(1, ""), s(2, "")]);
    let spec = msg(&[ld(2, &container), vi(11, 0), vi(4, 0)]);
    let body = envelope("v1", "Pod", &msg(&[meta("p"), ld(2, &spec)]));
    assert_eq!(
        decode(&body).unwrap(),
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "creationTimestamp": null},
            "spec": {
                "containers": [{"name": "", "resources": {}}],
                "terminationGracePeriodSeconds": 0
            },
            "status": {}
        })
    );
}

#[test]
fn inline_structs_flatten_into_their_parent() {
    let volume = msg(&[s(1, "v"), ld(2, &ld(2, &s(1, "Memory")))]);
    let secret_ref = msg(&[ld(1, &s(1, "creds")), s(2, "key"), vi(3, 0)]);
    let env = msg(&[s(1, "E"), ld(3, &ld(4, &secret_ref))]);
    let container = msg(&[s(1, "c"), ld(7, &env)]);
    let spec = msg(&[ld(1, &volume), ld(2, &container)]);
    let got = decode(&envelope("v1", "Pod", &msg(&[meta("p"), ld(2, &spec)]))).unwrap();
    assert_eq!(
        got["spec"]["volumes"],
        json!([{"name": "v", "emptyDir": {"medium": "Memory"}}])
    );
    assert_eq!(
        got["spec"]["containers"][0]["env"],
        json!([{"name": "E", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "key", "optional": false}}}])
    );
}

#[test]
fn repeated_numbers_may_be_packed_or_not() {
    let unpacked = msg(&[vi(4, 1000), vi(4, 2000)]);
    let mut packed_payload = Vec::new();
    varint(1000, &mut packed_payload);
    varint(2000, &mut packed_payload);
    let packed = ld(4, &packed_payload);
    for security in [unpacked, packed] {
        let spec = msg(&[ld(14, &security)]);
        let got = decode(&envelope("v1", "Pod", &msg(&[meta("p"), ld(2, &spec)]))).unwrap();
        assert_eq!(
            got["spec"]["securityContext"],
            json!({"supplementalGroups": [1000, 2000]})
        );
    }
}

#[test]
fn repeated_occurrences_of_a_message_field_merge() {
    // Protobuf merges a message field seen twice; the last scalar wins.
    let body = envelope(
        "v1",
        "Namespace",
        &msg(&[meta("a"), ld(1, &s(3, "ns")), meta("b")]),
    );
    assert_eq!(
        decode(&body).unwrap()["metadata"],
        json!({"name": "b", "namespace": "ns", "creationTimestamp": null})
    );
}

#[test]
fn unknown_fields_are_skipped() {
    let object_meta = msg(&[s(1, "n"), vi(999, 5), s(1000, "future")]);
    let body = envelope("v1", "Namespace", &msg(&[ld(1, &object_meta), vi(77, 1)]));
    assert_eq!(
        decode(&body).unwrap(),
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "n", "creationTimestamp": null}, "spec": {}, "status": {}})
    );
}

#[test]
fn delete_options_decode_under_any_group_version() {
    let options = msg(&[vi(1, 0), s(4, "Foreground"), s(5, "All")]);
    for gv in ["v1", "apps/v1", "policy/v1", "meta.k8s.io/v1"] {
        let got = decode(&envelope(gv, "DeleteOptions", &options)).unwrap();
        assert_eq!(
            got,
            json!({"apiVersion": gv, "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                   "propagationPolicy": "Foreground", "dryRun": ["All"]})
        );
    }
}

#[test]
fn served_kinds_are_in_the_table() {
    let kinds = [
        ("v1", "Namespace"),
        ("v1", "Pod"),
        ("v1", "Node"),
        ("v1", "Service"),
        ("v1", "Endpoints"),
        ("v1", "ConfigMap"),
        ("v1", "Secret"),
        ("v1", "Event"),
        ("v1", "ServiceAccount"),
        ("v1", "Binding"),
        ("apps/v1", "Deployment"),
        ("apps/v1", "ReplicaSet"),
        ("apps/v1", "DaemonSet"),
        ("coordination.k8s.io/v1", "Lease"),
        ("discovery.k8s.io/v1", "EndpointSlice"),
        ("autoscaling/v1", "Scale"),
        ("policy/v1", "Eviction"),
        ("authentication.k8s.io/v1", "TokenRequest"),
        ("meta.k8s.io/v1", "DeleteOptions"),
    ];
    for (api_version, kind) in kinds {
        let got = decode(&envelope(api_version, kind, &[]))
            .unwrap_or_else(|e| panic!("{api_version} {kind}: {e}"));
        assert_eq!(got["kind"], json!(kind));
        assert_eq!(got["apiVersion"], json!(api_version));
    }
}

// ---------------------------------------------------------------------------------------------
// Errors and arbitrary input
// ---------------------------------------------------------------------------------------------

#[test]
fn protobuf_content_types_are_recognised() {
    assert!(is_content_type("application/vnd.kubernetes.protobuf"));
    assert!(is_content_type(
        "application/vnd.kubernetes.protobuf; charset=utf-8"
    ));
    assert!(is_content_type("Application/VND.Kubernetes.Protobuf"));
    assert!(!is_content_type("application/json"));
    assert!(!is_content_type("application/vnd.kubernetes.protobuf+json"));
    assert!(!is_content_type(""));
}

#[test]
fn a_body_without_the_magic_is_rejected() {
    assert!(matches!(decode(b""), Err(Error::BadMagic)));
    assert!(matches!(
        decode(b"{\"kind\":\"Pod\"}"),
        Err(Error::BadMagic)
    ));
    assert!(matches!(decode(b"k8s"), Err(Error::BadMagic)));
    assert!(!is_protobuf(b"k8s"));
    assert!(is_protobuf(&envelope("v1", "Namespace", &[])));
}

#[test]
fn truncated_bodies_are_rejected() {
    let body = fixture("deployment", "v1_32.pb");
    for len in [5, 10, body.len() / 2, body.len() - 1] {
        let err = decode(&body[..len]).unwrap_err();
        assert!(matches!(err, Error::Truncated { .. }), "{len}: {err}");
    }
}

#[test]
fn an_unknown_kind_is_named_in_the_error() {
    let err = decode(&envelope("example.com/v1", "Widget", &meta("w"))).unwrap_err();
    assert!(matches!(&err, Error::UnknownKind { api_version, kind }
        if api_version == "example.com/v1" && kind == "Widget"));
    let text = err.to_string();
    assert!(
        text.contains("example.com/v1") && text.contains("Widget"),
        "{text}"
    );
    // A known kind under a group version that does not serve it.
    let err = decode(&envelope("apps/v1", "Namespace", &[])).unwrap_err();
    assert!(matches!(err, Error::UnknownKind { .. }), "{err}");
    // No typeMeta at all.
    let mut body = MAGIC.to_vec();
    body.extend(ld(2, &meta("x")));
    assert!(matches!(decode(&body), Err(Error::UnknownKind { .. })));
}

#[test]
fn a_wire_type_that_contradicts_the_schema_is_rejected() {
    // metadata.name (a string) sent as a varint.
    let err = decode(&envelope("v1", "Namespace", &ld(1, &vi(1, 5)))).unwrap_err();
    assert!(
        matches!(
            err,
            Error::WireTypeMismatch {
                tag: 1,
                field: "name",
                found: 0,
                expected: 2,
                ..
            }
        ),
        "{err}"
    );
    // metadata.generation (an int64) sent as bytes.
    let err = decode(&envelope("v1", "Namespace", &ld(1, &s(7, "x")))).unwrap_err();
    assert!(
        matches!(
            err,
            Error::WireTypeMismatch {
                field: "generation",
                found: 2,
                expected: 0,
                ..
            }
        ),
        "{err}"
    );
    // metadata (a message) sent as a varint.
    let err = decode(&envelope("v1", "Namespace", &vi(1, 1))).unwrap_err();
    assert!(
        matches!(
            err,
            Error::WireTypeMismatch {
                field: "metadata",
                ..
            }
        ),
        "{err}"
    );
    // IntOrString.intVal sent as bytes.
    let err = decode(&envelope(
        "v1",
        "Service",
        &ld(2, &ld(1, &ld(4, &s(2, "x")))),
    ))
    .unwrap_err();
    assert!(matches!(err, Error::WireTypeMismatch { .. }), "{err}");
}

#[test]
fn a_content_encoding_is_rejected() {
    let type_meta = msg(&[s(1, "v1"), s(2, "Namespace")]);
    let mut body = MAGIC.to_vec();
    body.extend(msg(&[ld(1, &type_meta), ld(2, &meta("x")), s(3, "gzip")]));
    assert!(matches!(decode(&body), Err(Error::UnsupportedEncoding(e)) if e == "gzip"));
}

#[test]
fn nesting_is_bounded() {
    // ControllerRevisions nested through their RawExtension data, deeper than any object.
    let mut body = envelope("v1", "Namespace", &meta("leaf"));
    for _ in 0..MAX_DEPTH {
        body = envelope(
            "apps/v1",
            "ControllerRevision",
            &msg(&[meta("r"), ld(2, &ld(1, &body))]),
        );
    }
    assert!(matches!(decode(&body), Err(Error::TooDeep)));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

    /// Arbitrary bytes after the magic never panic.
    #[test]
    fn arbitrary_bytes_never_panic(tail in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
        let mut body = MAGIC.to_vec();
        body.extend(tail);
        let _ = decode(&body);
    }

    /// Arbitrary message bytes inside a valid envelope of each fixture's kind never panic.
    #[test]
    fn arbitrary_messages_never_panic(
        kind in proptest::sample::select(vec![
            ("v1", "Pod"), ("v1", "Service"), ("apps/v1", "Deployment"), ("v1", "Secret"),
            ("coordination.k8s.io/v1", "Lease"), ("apps/v1", "ControllerRevision"),
        ]),
        raw in proptest::collection::vec(proptest::num::u8::ANY, 0..512),
    ) {
        let _ = decode(&envelope(kind.0, kind.1, &raw));
    }

    /// Real bodies with bytes overwritten or cut never panic.
    #[test]
    fn mutated_kubectl_bodies_never_panic(
        which in 0..FIXTURES.len(),
        edits in proptest::collection::vec((proptest::num::usize::ANY, proptest::num::u8::ANY), 1..8),
        cut in proptest::option::of(proptest::num::usize::ANY),
    ) {
        let mut body = fixture(FIXTURES[which], "v1_33.pb");
        for (at, byte) in edits {
            let at = at % body.len();
            body[at] = byte;
        }
        if let Some(cut) = cut {
            body.truncate(cut % (body.len() + 1));
        }
        let _ = decode(&body);
    }
}

// ---------------------------------------------------------------------------------------------
// The generated table against k8s-openapi
// ---------------------------------------------------------------------------------------------

/// A message with every field set to a non-zero value, nested `depth` levels.
fn full_message(index: u16, depth: usize) -> Vec<u8> {
    let mut out = Vec::new();
    if depth == 0 {
        return out;
    }
    for field in schema::MESSAGES[usize::from(index)].fields {
        let value = full_value(field.ty, depth);
        let encoded = match field.ty {
            Type::Bool | Type::Int32 | Type::Int64 => {
                let v = if field.ty == Type::Bool { 1 } else { 3 };
                let mut e = Vec::new();
                varint(u64::from(field.tag) << 3, &mut e);
                varint(v, &mut e);
                e
            }
            Type::Double => {
                let mut e = Vec::new();
                varint(u64::from(field.tag) << 3 | 1, &mut e);
                e.extend(1.5f64.to_le_bytes());
                e
            }
            _ => ld(field.tag, &value),
        };
        out.extend(match field.card {
            Card::Map => {
                let value_field = match field.ty {
                    Type::Bool | Type::Int32 | Type::Int64 => vi(2, 3),
                    _ => ld(2, &value),
                };
                ld(field.tag, &msg(&[s(1, "k"), value_field]))
            }
            Card::One | Card::Repeated => encoded,
        });
    }
    out
}

/// The payload of a length-delimited value of `ty`.
fn full_value(ty: Type, depth: usize) -> Vec<u8> {
    match ty {
        Type::String => b"x".to_vec(),
        Type::Bytes => b"b".to_vec(),
        Type::Bool | Type::Int32 | Type::Int64 | Type::Double => Vec::new(),
        Type::Message(child) => full_message(child, depth - 1),
        Type::Quantity => s(1, "1"),
        Type::IntOrString => msg(&[vi(1, 0), vi(2, 5)]),
        Type::Time => msg(&[vi(1, 1_704_164_645)]),
        Type::MicroTime => msg(&[vi(1, 1_704_164_645), vi(2, 5_000)]),
        Type::Duration => vi(1, 1_000_000_000),
        Type::RawJson => ld(1, br#"{"a":1}"#),
        Type::StringList => s(1, "x"),
    }
}

/// Decodes a fully populated object of the kind, reads it into its k8s-openapi type and writes it
/// back: a JSON name or representation that k8s-openapi does not know is lost on the way and
/// shows up as a difference (`allowed` lists path suffixes of fields newer than Kubernetes 1.33,
/// which k8s-pb 0.9.0 has and k8s-openapi's v1_33 does not).
fn round_trip<T>(api_version: &str, kind: &str, allowed: &[&str]) -> Vec<String>
where
    T: serde::de::DeserializeOwned + serde::Serialize,
{
    let index = schema::KINDS
        .iter()
        .find(|&&(gv, k, _)| gv == api_version && k == kind)
        .unwrap_or_else(|| panic!("{api_version} {kind} not in the table"))
        .2;
    let decoded = decode(&envelope(api_version, kind, &full_message(index, 12))).unwrap();
    let typed: T = serde_json::from_value(decoded.clone())
        .unwrap_or_else(|e| panic!("{kind}: k8s-openapi rejects the decoded JSON: {e}"));
    let again = serde_json::to_value(&typed).unwrap();
    let mut lost = Vec::new();
    diff("", &decoded, &again, &mut lost);
    lost.retain(|path| !allowed.iter().any(|suffix| path.ends_with(suffix)));
    lost.iter().map(|path| format!("{kind}: {path}")).collect()
}

fn diff(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                match b.get(k) {
                    Some(w) => diff(&format!("{path}/{k}"), v, w, out),
                    // k8s-openapi reads `null` as None, which it leaves out.
                    None if v.is_null() => {}
                    None => out.push(format!("{path}/{k}")),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (v, w)) in a.iter().zip(b).enumerate() {
                diff(&format!("{path}/{i}"), v, w, out);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(format!("{path}: {a} became {b}")),
    }
}

/// Fields of Kubernetes newer than 1.33 (in k8s-pb 0.9.0, not in k8s-openapi's v1_33).
const NEWER_THAN_1_33: &[&str] = &[
    "/spec/hostnameOverride",
    "/spec/workloadRef",
    "/restartPolicyRules",
    "/valueFrom/fileKeyRef",
    "/sources/0/podCertificate",
    "/status/allocatedResources",
    "/status/extendedResourceClaimStatus",
    "/status/resources",
    "/status/declaredFeatures",
];

#[test]
fn served_kinds_round_trip_through_k8s_openapi() {
    use k8s_openapi::api::{
        apps, authentication, autoscaling, coordination, core, discovery, policy,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta;
    let newer = NEWER_THAN_1_33;
    let mut lost = Vec::new();
    lost.extend(round_trip::<core::v1::Namespace>("v1", "Namespace", newer));
    lost.extend(round_trip::<core::v1::Pod>("v1", "Pod", newer));
    lost.extend(round_trip::<core::v1::Node>("v1", "Node", newer));
    lost.extend(round_trip::<core::v1::Service>("v1", "Service", newer));
    lost.extend(round_trip::<core::v1::Endpoints>("v1", "Endpoints", newer));
    lost.extend(round_trip::<core::v1::ConfigMap>("v1", "ConfigMap", newer));
    lost.extend(round_trip::<core::v1::Secret>("v1", "Secret", newer));
    lost.extend(round_trip::<core::v1::Event>("v1", "Event", newer));
    lost.extend(round_trip::<core::v1::ServiceAccount>(
        "v1",
        "ServiceAccount",
        newer,
    ));
    lost.extend(round_trip::<core::v1::Binding>("v1", "Binding", newer));
    lost.extend(round_trip::<apps::v1::Deployment>(
        "apps/v1",
        "Deployment",
        newer,
    ));
    lost.extend(round_trip::<apps::v1::ReplicaSet>(
        "apps/v1",
        "ReplicaSet",
        newer,
    ));
    lost.extend(round_trip::<apps::v1::DaemonSet>(
        "apps/v1",
        "DaemonSet",
        newer,
    ));
    lost.extend(round_trip::<coordination::v1::Lease>(
        "coordination.k8s.io/v1",
        "Lease",
        newer,
    ));
    lost.extend(round_trip::<discovery::v1::EndpointSlice>(
        "discovery.k8s.io/v1",
        "EndpointSlice",
        newer,
    ));
    lost.extend(round_trip::<autoscaling::v1::Scale>(
        "autoscaling/v1",
        "Scale",
        newer,
    ));
    lost.extend(round_trip::<policy::v1::Eviction>(
        "policy/v1",
        "Eviction",
        newer,
    ));
    lost.extend(round_trip::<authentication::v1::TokenRequest>(
        "authentication.k8s.io/v1",
        "TokenRequest",
        newer,
    ));
    lost.extend(round_trip::<meta::v1::DeleteOptions>(
        "meta.k8s.io/v1",
        "DeleteOptions",
        newer,
    ));
    assert!(lost.is_empty(), "k8s-openapi lost or changed {lost:#?}");
}

/// A small deterministic generator for [`random_message`].
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A well-formed message with a random subset of fields set to random (often zero) values.
fn random_message(index: u16, depth: usize, rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::new();
    if depth == 0 {
        return out;
    }
    for field in schema::MESSAGES[usize::from(index)].fields {
        let count = match field.card {
            Card::One => rng.below(2),
            Card::Repeated | Card::Map => rng.below(3),
        };
        for i in 0..count {
            let value = random_value(field.ty, depth, rng);
            out.extend(match field.card {
                Card::Map => ld(
                    field.tag,
                    &msg(&[s(1, &format!("k{i}")), with_tag(2, field.ty, value)]),
                ),
                Card::One | Card::Repeated => with_tag(field.tag, field.ty, value),
            });
        }
    }
    out
}

/// `value` (a varint, fixed64 or payload, by `ty`) as field `tag`.
fn with_tag(tag: u32, ty: Type, value: Vec<u8>) -> Vec<u8> {
    let mut out = Vec::new();
    match ty {
        Type::Bool | Type::Int32 | Type::Int64 => varint(u64::from(tag) << 3, &mut out),
        Type::Double => varint(u64::from(tag) << 3 | 1, &mut out),
        _ => return ld(tag, &value),
    }
    out.extend(value);
    out
}

fn random_value(ty: Type, depth: usize, rng: &mut Rng) -> Vec<u8> {
    let number = |rng: &mut Rng| {
        let mut out = Vec::new();
        let v = [0, 1, 80, u64::MAX, 1 << 40][rng.below(5) as usize];
        varint(v, &mut out);
        out
    };
    match ty {
        Type::String => ["", "x", "ünï", "a b"][rng.below(4) as usize]
            .as_bytes()
            .to_vec(),
        Type::Bytes => vec![0, 255, 7][..rng.below(4) as usize].to_vec(),
        Type::Bool => vec![rng.below(2) as u8],
        Type::Int32 | Type::Int64 => number(rng),
        Type::Double => [0.0f64, -2.5, 1e300][rng.below(3) as usize]
            .to_le_bytes()
            .to_vec(),
        Type::Message(child) => random_message(child, depth - 1, rng),
        Type::Quantity => s(1, ["", "1", "500m", "1Gi"][rng.below(4) as usize]),
        Type::IntOrString => msg(&[vi(1, rng.below(2)), vi(2, 8080), s(3, "http")]),
        Type::Time | Type::MicroTime => {
            let seconds = [0u64, 1_704_164_645, (-1i64) as u64][rng.below(3) as usize];
            msg(&[vi(1, seconds), vi(2, rng.below(2_000_000_000))])
        }
        Type::Duration => vi(1, rng.below(1 << 40)),
        Type::RawJson => ld(1, [&b"{}"[..], b"[1]", b"\"s\""][rng.below(3) as usize]),
        Type::StringList => msg(&[s(1, "a"), s(1, "")]),
    }
}

/// Drops `null` values of the `meta/v1.Time` fields k8s-openapi declares required although Go
/// writes `null` for their zero value: `Condition.lastTransitionTime` (here, under a Service's
/// `status.conditions`); elsewhere also `TokenRequestStatus.expirationTimestamp` and events/v1
/// `EventSeries.lastObservedTime`. k8s-openapi refuses both `null` and absence for them.
fn without_null_transition_times(mut value: Value) -> Value {
    if let Some(conditions) = value
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        for condition in conditions.iter_mut().filter_map(Value::as_object_mut) {
            if condition.get("lastTransitionTime") == Some(&Value::Null) {
                condition.insert("lastTransitionTime".into(), json!("2024-01-02T03:04:05Z"));
            }
        }
    }
    value
}

/// Decodes a random well-formed object of the kind and reads it as its k8s-openapi type.
fn decodes_into<T: serde::de::DeserializeOwned>(api_version: &str, kind: &str, rng: &mut Rng) {
    let index = schema::KINDS
        .iter()
        .find(|k| k.0 == api_version && k.1 == kind)
        .unwrap()
        .2;
    let body = envelope(api_version, kind, &random_message(index, 10, rng));
    let decoded = decode(&body).unwrap_or_else(|e| panic!("{kind}: {e}"));
    if let Err(e) = serde_json::from_value::<T>(without_null_transition_times(decoded.clone())) {
        panic!("{kind}: k8s-openapi: {e}\n{decoded:#}");
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

    /// Any well-formed object of these kinds decodes, and its k8s-openapi type reads the JSON.
    #[test]
    fn well_formed_objects_decode_into_json_k8s_openapi_reads(seed in 1u64..) {
        use k8s_openapi::api::{apps, coordination, core};
        let mut rng = Rng(seed);
        decodes_into::<core::v1::Pod>("v1", "Pod", &mut rng);
        decodes_into::<core::v1::Service>("v1", "Service", &mut rng);
        decodes_into::<core::v1::Node>("v1", "Node", &mut rng);
        decodes_into::<core::v1::Secret>("v1", "Secret", &mut rng);
        decodes_into::<apps::v1::Deployment>("apps/v1", "Deployment", &mut rng);
        decodes_into::<coordination::v1::Lease>("coordination.k8s.io/v1", "Lease", &mut rng);
    }
}
