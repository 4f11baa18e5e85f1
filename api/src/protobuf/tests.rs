//! Tests of [`decode`](super::decode) against real kubectl bodies, the special types, and
//! arbitrary input.

use serde_json::Value;

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
];

fn fixture(name: &str, ext: &str) -> Vec<u8> {
    let path = format!(
        "{}/testdata/protobuf/{name}.{ext}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
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
