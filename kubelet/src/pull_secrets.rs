//! `imagePullSecrets`: the registry credentials of a pod's docker config secrets
//! (`kubernetes.io/dockerconfigjson`'s `.dockerconfigjson`, the legacy `kubernetes.io/dockercfg`'s
//! `.dockercfg`) that apply to an image, most specific first, as the kubelet hands them to the
//! runtime's pull (CRI `AuthConfig`). A pull tries them in turn, then without credentials.
//!
//! A config key names a registry as docker writes it: `host`, `host:port`, `host/path` (a
//! repository prefix), with or without `https://` and docker's `/v1/` suffix; a host may start with
//! `*.` for its subdomains. Images without a registry host are docker.io's, whose keys come in
//! several spellings (`https://index.docker.io/v1/`, `docker.io`, ...).

use std::collections::BTreeMap;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize;

use crate::runtime::RegistryAuth;
use crate::spec::Sources;

/// The names docker.io goes by in docker configs.
const DOCKER_HUB: [&str; 3] = ["docker.io", "index.docker.io", "registry-1.docker.io"];

#[derive(Deserialize, Default)]
struct Entry {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    auth: String,
}

#[derive(Deserialize)]
struct DockerConfigJson {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
}

/// The registry host of an image reference (`docker.io` when it names none) and its repository
/// path.
pub fn split_image(image: &str) -> (String, String) {
    let name = image.split('@').next().unwrap_or(image);
    let (first, rest) = name.split_once('/').unwrap_or(("", name));
    let (host, path) = if !first.is_empty()
        && (first.contains('.') || first.contains(':') || first == "localhost")
    {
        (first.to_string(), rest)
    } else {
        ("docker.io".to_string(), name)
    };
    // The tag is not part of the repository.
    let path = match path.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => repo,
        _ => path,
    };
    let path = if host == "docker.io" && !path.contains('/') {
        format!("library/{path}")
    } else {
        path.to_string()
    };
    (host, path)
}

/// A config key as (host, repository prefix).
fn split_key(key: &str) -> (String, String) {
    let key = key
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let key = key.trim_end_matches('/');
    let key = key.strip_suffix("/v1").unwrap_or(key);
    let key = key.strip_suffix("/v2").unwrap_or(key);
    let (host, path) = key.split_once('/').unwrap_or((key, ""));
    let host = if DOCKER_HUB.contains(&host) {
        "docker.io"
    } else {
        host
    };
    (host.to_string(), path.to_string())
}

fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(domain) => host
            .strip_suffix(domain)
            .is_some_and(|sub| sub.ends_with('.') && sub.len() > 1),
        None => pattern == host,
    }
}

/// Whether a config key applies to an image, and how specifically (longer is more specific).
fn specificity(key: &str, image_host: &str, image_path: &str) -> Option<usize> {
    let (host, path) = split_key(key);
    if !host_matches(&host, image_host) {
        return None;
    }
    if !path.is_empty() && image_path != path && !image_path.starts_with(&format!("{path}/")) {
        return None;
    }
    Some(host.len() + path.len())
}

fn entry_auth(key: &str, entry: Entry) -> RegistryAuth {
    let mut auth = RegistryAuth {
        server: key.to_string(),
        username: entry.username,
        password: entry.password,
    };
    if auth.username.is_empty()
        && let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(entry.auth.trim())
        && let Ok(text) = String::from_utf8(decoded)
        && let Some((user, password)) = text.split_once(':')
    {
        auth.username = user.to_string();
        auth.password = password.to_string();
    }
    auth
}

/// The entries of one secret's docker config (either key), empty when it has none or it does
/// not parse.
fn secret_entries(data: &BTreeMap<String, Vec<u8>>) -> BTreeMap<String, Entry> {
    if let Some(json) = data.get(".dockerconfigjson") {
        return serde_json::from_slice::<DockerConfigJson>(json)
            .map(|c| c.auths)
            .unwrap_or_default();
    }
    if let Some(json) = data.get(".dockercfg") {
        return serde_json::from_slice(json).unwrap_or_default();
    }
    BTreeMap::new()
}

/// The credentials of `pod`'s `imagePullSecrets` (those `sources` holds) for `image`, most
/// specific first; secrets in the order the pod lists them break ties.
pub fn credentials(pod: &Pod, image: &str, sources: &Sources) -> Vec<RegistryAuth> {
    let (host, path) = split_image(image);
    let mut found: Vec<(usize, usize, RegistryAuth)> = Vec::new();
    let names = pod
        .spec
        .iter()
        .flat_map(|s| s.image_pull_secrets.iter().flatten())
        .map(|r| r.name.clone());
    for (order, name) in names.enumerate() {
        let Some(data) = sources.secret_data(&name) else {
            continue;
        };
        for (key, entry) in secret_entries(&data) {
            if let Some(score) = specificity(&key, &host, &path) {
                found.push((score, order, entry_auth(&key, entry)));
            }
        }
    }
    found.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    found.into_iter().map(|(_, _, auth)| auth).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{LocalObjectReference, PodSpec, Secret};

    #[test]
    fn images_split_into_registry_and_repository() {
        assert_eq!(
            split_image("nginx"),
            ("docker.io".into(), "library/nginx".into())
        );
        assert_eq!(
            split_image("bitnami/redis:7"),
            ("docker.io".into(), "bitnami/redis".into())
        );
        assert_eq!(
            split_image("127.0.0.1:5000/team/app:v1"),
            ("127.0.0.1:5000".into(), "team/app".into())
        );
        assert_eq!(
            split_image("localhost/app@sha256:abc"),
            ("localhost".into(), "app".into())
        );
        assert_eq!(
            split_image("ghcr.io/o/app"),
            ("ghcr.io".into(), "o/app".into())
        );
    }

    #[test]
    fn keys_match_by_host_path_prefix_and_wildcard() {
        let s = |k, img: &str| {
            let (h, p) = split_image(img);
            specificity(k, &h, &p)
        };
        assert!(s("https://index.docker.io/v1/", "nginx").is_some());
        assert!(s("docker.io", "bitnami/redis").is_some());
        assert!(s("127.0.0.1:5000", "127.0.0.1:5000/app:v1").is_some());
        assert!(s("http://127.0.0.1:5000/", "127.0.0.1:5000/app").is_some());
        assert!(s("127.0.0.1:5001", "127.0.0.1:5000/app").is_none());
        assert!(s("reg.example/team", "reg.example/team/app").is_some());
        assert!(s("reg.example/team", "reg.example/teammate/app").is_none());
        assert!(s("*.example.com", "a.example.com/app").is_some());
        assert!(s("*.example.com", "example.com/app").is_none());
        assert!(s("ghcr.io", "nginx").is_none());
        assert!(
            s("reg.example/team", "reg.example/team/app")
                > s("reg.example", "reg.example/team/app")
        );
    }

    fn secret(json: &str) -> Secret {
        Secret {
            data: Some(BTreeMap::from([(
                ".dockerconfigjson".to_string(),
                ByteString(json.as_bytes().to_vec()),
            )])),
            ..Default::default()
        }
    }

    #[test]
    fn a_pods_secrets_give_the_matching_credentials_most_specific_first() {
        let mut sources = Sources::default();
        // `auth` alone is base64 of user:password.
        let auth = base64::engine::general_purpose::STANDARD.encode("ann:pw1");
        sources.secrets.insert(
            "broad".into(),
            secret(&format!(
                r#"{{"auths":{{"reg.example":{{"auth":"{auth}"}},"other.example":{{"username":"x","password":"y"}}}}}}"#
            )),
        );
        sources.secrets.insert(
            "narrow".into(),
            secret(r#"{"auths":{"https://reg.example/team":{"username":"bob","password":"pw2"}}}"#),
        );
        sources.secrets.insert("garbage".into(), secret("not json"));
        let pod = Pod {
            spec: Some(PodSpec {
                image_pull_secrets: Some(
                    ["broad", "missing", "garbage", "narrow"]
                        .into_iter()
                        .map(|n| LocalObjectReference { name: n.into() })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        };
        let found = credentials(&pod, "reg.example/team/app:1", &sources);
        let users: Vec<(&str, &str)> = found
            .iter()
            .map(|a| (a.username.as_str(), a.password.as_str()))
            .collect();
        assert_eq!(users, [("bob", "pw2"), ("ann", "pw1")]);
        assert!(credentials(&pod, "nginx", &sources).is_empty());
    }
}
