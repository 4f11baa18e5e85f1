//! Projected volumes (`projected`: serviceAccountToken, configMap, secret and downwardAPI sources
//! in one directory) and downwardAPI volumes: which files they hold, worked out from the pod and
//! the fetched [`Sources`]. [`crate::volumes`] writes them.
//!
//! The service-account token comes from [`Sources::tokens`], which the agent fills through
//! TokenRequest ([`crate::tokens`]) and refreshes before 80% of its lifetime, so rewriting the
//! volume on each sync keeps the file current.
//!
//! With the process runtime a container sees the volume through the link at its mount path under
//! `$POD_ROOT` (see [`crate::volumes`]): the projected service-account files are at
//! `$POD_ROOT/var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt,namespace}`, which is
//! `var/run/secrets/kubernetes.io/serviceaccount` relative to the default working directory, not
//! at the absolute path (no mount namespace). In-cluster clients that read the absolute path
//! must be pointed there (the Python client: its `SERVICE_TOKEN_FILENAME` and
//! `SERVICE_CERT_FILENAME`); with the CRI runtime the volume is bind-mounted at the real path.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    DownwardAPIVolumeFile, KeyToPath, Pod, ProjectedVolumeSource, Volume,
};

use crate::spec::Sources;
use crate::volumes::Error;

/// The default lifetime of a projected token (the API's default for the field).
pub const DEFAULT_TOKEN_EXPIRATION_SECONDS: i64 = 3600;

/// The key of a token for `audience` (empty: the API server's) living `expiration_seconds`.
pub fn token_key(audience: &str, expiration_seconds: i64) -> String {
    format!("{expiration_seconds}/{audience}")
}

/// The ConfigMaps and Secrets a volume's projected sources name, as (kind, name).
pub fn referenced(volume: &Volume) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    for source in volume
        .projected
        .iter()
        .flat_map(|p| p.sources.iter().flatten())
    {
        if let Some(cm) = &source.config_map {
            out.push(("ConfigMap", cm.name.clone()));
        }
        if let Some(secret) = &source.secret {
            out.push(("Secret", secret.name.clone()));
        }
    }
    out
}

/// The tokens a pod's projected volumes need: (audience, expirationSeconds), without repeats.
pub fn token_requests(pod: &Pod) -> Vec<(String, i64)> {
    let mut out: Vec<(String, i64)> = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .flat_map(|v| v.projected.iter().flat_map(|p| p.sources.iter().flatten()))
        .filter_map(|s| s.service_account_token.as_ref())
        .map(|t| {
            (
                t.audience.clone().unwrap_or_default(),
                t.expiration_seconds
                    .unwrap_or(DEFAULT_TOKEN_EXPIRATION_SECONDS),
            )
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// One file of a volume: its path inside the volume, contents and mode, if the item sets one.
pub type File = (String, Vec<u8>, Option<i32>);

/// Picks `items` of `data` (or all of it), as a configMap or secret volume does.
fn pick(
    volume: &str,
    data: BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    optional: bool,
) -> Result<Vec<File>, Error> {
    let Some(items) = items else {
        return Ok(data.into_iter().map(|(k, v)| (k, v, None)).collect());
    };
    let mut out = Vec::new();
    for item in items {
        match data.get(&item.key) {
            Some(v) => out.push((item.path.clone(), v.clone(), item.mode)),
            None if optional => {}
            None => {
                return Err(Error::KeyNotFound {
                    volume: volume.to_string(),
                    key: item.key.clone(),
                });
            }
        }
    }
    Ok(out)
}

/// The files of downward API `items`.
pub fn downward_files(
    volume: &str,
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
) -> Result<Vec<File>, Error> {
    let mut out = Vec::new();
    for item in items {
        let Some(field) = &item.field_ref else {
            return Err(Error::Unsupported(format!(
                "{volume} (downwardAPI item {}: only fieldRef)",
                item.path
            )));
        };
        let meta = &pod.metadata;
        let map_text = |map: Option<&BTreeMap<String, String>>| {
            map.into_iter()
                .flatten()
                .map(|(k, v)| format!("{k}={v:?}"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        let value = match field.field_path.as_str() {
            "metadata.labels" => map_text(meta.labels.as_ref()),
            "metadata.annotations" => map_text(meta.annotations.as_ref()),
            path => crate::spec::field_value(pod, path, "", "").map_err(|e| {
                Error::Unsupported(format!("{volume} (downwardAPI item {}: {e})", item.path))
            })?,
        };
        out.push((item.path.clone(), value.into_bytes(), item.mode));
    }
    Ok(out)
}

/// Every file of projected volume `volume`.
pub fn projected_files(
    volume: &str,
    pod: &Pod,
    projected: &ProjectedVolumeSource,
    sources: &Sources,
) -> Result<Vec<File>, Error> {
    let mut out = Vec::new();
    for source in projected.sources.iter().flatten() {
        if let Some(cm) = &source.config_map {
            let optional = cm.optional == Some(true);
            match sources.config_map_data(&cm.name) {
                Some(data) => out.extend(pick(volume, data, cm.items.as_deref(), optional)?),
                None if optional => {}
                None => {
                    return Err(Error::SourceNotFound {
                        volume: volume.to_string(),
                        kind: "configmap",
                        name: cm.name.clone(),
                    });
                }
            }
        }
        if let Some(secret) = &source.secret {
            let optional = secret.optional == Some(true);
            match sources.secret_data(&secret.name) {
                Some(data) => out.extend(pick(volume, data, secret.items.as_deref(), optional)?),
                None if optional => {}
                None => {
                    return Err(Error::SourceNotFound {
                        volume: volume.to_string(),
                        kind: "secret",
                        name: secret.name.clone(),
                    });
                }
            }
        }
        if let Some(downward) = &source.downward_api {
            out.extend(downward_files(
                volume,
                pod,
                downward.items.as_deref().unwrap_or_default(),
            )?);
        }
        if let Some(projection) = &source.service_account_token {
            let key = token_key(
                projection.audience.as_deref().unwrap_or_default(),
                projection
                    .expiration_seconds
                    .unwrap_or(DEFAULT_TOKEN_EXPIRATION_SECONDS),
            );
            match sources.tokens.get(&key) {
                Some(Ok(token)) => {
                    out.push((projection.path.clone(), token.clone().into_bytes(), None))
                }
                Some(Err(reason)) => {
                    return Err(Error::TokenUnavailable {
                        volume: volume.to_string(),
                        reason: reason.clone(),
                    });
                }
                None => {
                    return Err(Error::TokenUnavailable {
                        volume: volume.to_string(),
                        reason: "no token was fetched".into(),
                    });
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ConfigMap, ConfigMapProjection, DownwardAPIProjection, ObjectFieldSelector, PodSpec,
        ServiceAccountTokenProjection, VolumeProjection,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    /// The volume the ServiceAccount admission plugin adds.
    fn service_account_volume() -> Volume {
        Volume {
            name: "kube-api-access-x2b4z".into(),
            projected: Some(ProjectedVolumeSource {
                default_mode: Some(0o644),
                sources: Some(vec![
                    VolumeProjection {
                        service_account_token: Some(ServiceAccountTokenProjection {
                            expiration_seconds: Some(3607),
                            path: "token".into(),
                            audience: None,
                        }),
                        ..Default::default()
                    },
                    VolumeProjection {
                        config_map: Some(ConfigMapProjection {
                            name: "kube-root-ca.crt".into(),
                            items: Some(vec![KeyToPath {
                                key: "ca.crt".into(),
                                path: "ca.crt".into(),
                                mode: None,
                            }]),
                            optional: None,
                        }),
                        ..Default::default()
                    },
                    VolumeProjection {
                        downward_api: Some(DownwardAPIProjection {
                            items: Some(vec![DownwardAPIVolumeFile {
                                path: "namespace".into(),
                                field_ref: Some(ObjectFieldSelector {
                                    api_version: Some("v1".into()),
                                    field_path: "metadata.namespace".into(),
                                }),
                                ..Default::default()
                            }]),
                        }),
                        ..Default::default()
                    },
                ]),
            }),
            ..Default::default()
        }
    }

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("team".into()),
                labels: Some(BTreeMap::from([
                    ("app".into(), "web".into()),
                    ("tier".into(), "a b".into()),
                ])),
                ..Default::default()
            },
            spec: Some(PodSpec {
                volumes: Some(vec![service_account_volume()]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_service_account_volume_holds_token_ca_and_namespace() {
        let pod = pod();
        assert_eq!(token_requests(&pod), vec![(String::new(), 3607)]);
        assert_eq!(
            referenced(&service_account_volume()),
            vec![("ConfigMap", "kube-root-ca.crt".to_string())]
        );
        let mut sources = Sources::default();
        let projected = service_account_volume().projected.unwrap();
        // Without a token the volume cannot be made, and says why.
        sources
            .tokens
            .insert(token_key("", 3607), Err("forbidden".into()));
        assert!(matches!(
            projected_files("v", &pod, &projected, &sources),
            Err(Error::TokenUnavailable { reason, .. }) if reason == "forbidden"
        ));
        sources.tokens.insert(token_key("", 3607), Ok("jwt".into()));
        // Nor without the CA bundle.
        assert!(matches!(
            projected_files("v", &pod, &projected, &sources),
            Err(Error::SourceNotFound { .. })
        ));
        sources.config_maps.insert(
            "kube-root-ca.crt".into(),
            ConfigMap {
                data: Some(BTreeMap::from([
                    ("ca.crt".into(), "PEM".into()),
                    ("other".into(), "x".into()),
                ])),
                ..Default::default()
            },
        );
        let files = projected_files("v", &pod, &projected, &sources).unwrap();
        assert_eq!(
            files,
            vec![
                ("token".to_string(), b"jwt".to_vec(), None),
                ("ca.crt".to_string(), b"PEM".to_vec(), None),
                ("namespace".to_string(), b"team".to_vec(), None),
            ]
        );
    }

    #[test]
    fn downward_items_cover_names_and_label_maps() {
        let item = |path: &str, field: &str| DownwardAPIVolumeFile {
            path: path.into(),
            field_ref: Some(ObjectFieldSelector {
                api_version: None,
                field_path: field.into(),
            }),
            ..Default::default()
        };
        let files = downward_files(
            "v",
            &pod(),
            &[
                item("name", "metadata.name"),
                item("labels", "metadata.labels"),
                item("app", "metadata.labels['app']"),
            ],
        )
        .unwrap();
        assert_eq!(files[0].1, b"p");
        assert_eq!(
            String::from_utf8(files[1].1.clone()).unwrap(),
            "app=\"web\"\ntier=\"a b\""
        );
        assert_eq!(files[2].1, b"web");
        assert!(downward_files("v", &pod(), &[item("x", "status.bogus")]).is_err());
    }
}
