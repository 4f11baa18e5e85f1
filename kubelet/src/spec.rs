//! From a pod's container spec to what the runtime runs: environment (with `valueFrom` and
//! `envFrom` resolved), `$(VAR)` expansion of command and args, limits, and the spec hash.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Container, EphemeralContainer, Pod, PodSpec, Secret};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use sha2::{Digest, Sha256};

use crate::runtime::{Limits, Security};

/// Why a container's configuration cannot be built (the pod shows `CreateContainerConfigError`).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// A referenced ConfigMap does not exist.
    #[error("configmap \"{0}\" not found")]
    ConfigMapNotFound(String),
    /// A referenced Secret does not exist.
    #[error("secret \"{0}\" not found")]
    SecretNotFound(String),
    /// A referenced key is missing.
    #[error("couldn't find key {key} in {kind} {namespace}/{name}")]
    KeyNotFound {
        /// `ConfigMap` or `Secret`.
        kind: &'static str,
        /// The object's namespace.
        namespace: String,
        /// The object's name.
        name: String,
        /// The key.
        key: String,
    },
    /// A `fieldRef` or `resourceFieldRef` names something not supported.
    #[error("unsupported field path {0}")]
    UnsupportedField(String),
}

/// Result of spec resolution.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// ConfigMaps, Secrets and claims of the pod's namespace the caller fetched, by name.
#[derive(Clone, Debug, Default)]
pub struct Sources {
    /// ConfigMaps by name.
    pub config_maps: BTreeMap<String, ConfigMap>,
    /// Secrets by name.
    pub secrets: BTreeMap<String, Secret>,
    /// PersistentVolumeClaims by name: the host directory of the volume each is bound to, or
    /// why it cannot be mounted yet (unbound, being deleted, a volume without a local path).
    pub claims: BTreeMap<String, Result<std::path::PathBuf, String>>,
    /// Service-account tokens of projected volumes by [`crate::projected::token_key`], or why
    /// none could be had.
    pub tokens: BTreeMap<String, Result<String, String>>,
    /// `KUBERNETES_SERVICE_HOST`, `KUBERNETES_SERVICE_PORT` and the rest of the `kubernetes`
    /// Service's variables, which every container gets first (its own `env` may override them).
    pub service_env: Vec<(String, String)>,
}

impl Sources {
    /// The PersistentVolumeClaims a pod's volumes refer to.
    pub fn claims_referenced(pod: &Pod) -> Vec<String> {
        let mut out: Vec<String> = pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .filter_map(|v| v.persistent_volume_claim.as_ref())
            .map(|c| c.claim_name.clone())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The ConfigMaps and Secrets a pod refers to (env, envFrom, volumes), as (kind, name).
    pub fn referenced(pod: &Pod) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let Some(spec) = &pod.spec else { return out };
        let containers = spec
            .init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter());
        for c in containers {
            for e in c.env_from.iter().flatten() {
                if let Some(r) = &e.config_map_ref {
                    out.push(("ConfigMap", r.name.clone()));
                }
                if let Some(r) = &e.secret_ref {
                    out.push(("Secret", r.name.clone()));
                }
            }
            for e in c.env.iter().flatten() {
                let Some(from) = &e.value_from else { continue };
                if let Some(r) = &from.config_map_key_ref {
                    out.push(("ConfigMap", r.name.clone()));
                }
                if let Some(r) = &from.secret_key_ref {
                    out.push(("Secret", r.name.clone()));
                }
            }
        }
        // Registry credentials for the pulls.
        for r in spec.image_pull_secrets.iter().flatten() {
            out.push(("Secret", r.name.clone()));
        }
        for v in spec.volumes.iter().flatten() {
            if let Some(cm) = &v.config_map {
                out.push(("ConfigMap", cm.name.clone()));
            }
            if let Some(name) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
                out.push(("Secret", name));
            }
            out.extend(crate::projected::referenced(v));
        }
        out.sort();
        out.dedup();
        out
    }

    /// String data of a ConfigMap (`data` and UTF-8 `binaryData`).
    pub fn config_map_data(&self, name: &str) -> Option<BTreeMap<String, Vec<u8>>> {
        let cm = self.config_maps.get(name)?;
        let mut out: BTreeMap<String, Vec<u8>> = cm
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
            .collect();
        for (k, v) in cm.binary_data.iter().flatten() {
            out.insert(k.clone(), v.0.clone());
        }
        Some(out)
    }

    /// Decoded data of a Secret (`data`, and `stringData` when a client left it in).
    pub fn secret_data(&self, name: &str) -> Option<BTreeMap<String, Vec<u8>>> {
        let s = self.secrets.get(name)?;
        let mut out: BTreeMap<String, Vec<u8>> = s
            .data
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect();
        for (k, v) in s.string_data.iter().flatten() {
            out.insert(k.clone(), v.clone().into_bytes());
        }
        Some(out)
    }
}

/// The container's environment in order: the `kubernetes` Service's variables, `envFrom` sources,
/// then `env` (later entries win, as in Kubernetes), then `POD_IP` when the container does not
/// set it. `$(VAR)` in values refers to
/// entries before it.
pub fn resolve_env(
    pod: &Pod,
    container: &Container,
    pod_ip: &str,
    host_ip: &str,
    sources: &Sources,
) -> Result<Vec<(String, String)>> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let mut env: Vec<(String, String)> = sources.service_env.clone();
    let set = |env: &mut Vec<(String, String)>, k: String, v: String| {
        if let Some(slot) = env.iter_mut().find(|(name, _)| *name == k) {
            slot.1 = v;
        } else {
            env.push((k, v));
        }
    };
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let data = if let Some(r) = &from.config_map_ref {
            match sources.config_map_data(&r.name) {
                Some(d) => d,
                None if r.optional == Some(true) => continue,
                None => return Err(Error::ConfigMapNotFound(r.name.clone())),
            }
        } else if let Some(r) = &from.secret_ref {
            match sources.secret_data(&r.name) {
                Some(d) => d,
                None if r.optional == Some(true) => continue,
                None => return Err(Error::SecretNotFound(r.name.clone())),
            }
        } else {
            continue;
        };
        for (k, v) in data {
            set(
                &mut env,
                format!("{prefix}{k}"),
                String::from_utf8_lossy(&v).into_owned(),
            );
        }
    }
    for var in container.env.iter().flatten() {
        let value = match &var.value_from {
            None => {
                let lookup: BTreeMap<&str, &str> =
                    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                expand(var.value.as_deref().unwrap_or(""), &lookup)
            }
            Some(from) => {
                if let Some(f) = &from.field_ref {
                    field_value(pod, &f.field_path, pod_ip, host_ip)?
                } else if let Some(r) = &from.resource_field_ref {
                    resource_value(pod, container, r)?
                } else if let Some(r) = &from.config_map_key_ref {
                    match sources.config_map_data(&r.name) {
                        Some(d) => match d.get(&r.key) {
                            Some(v) => String::from_utf8_lossy(v).into_owned(),
                            None if r.optional == Some(true) => continue,
                            None => {
                                return Err(Error::KeyNotFound {
                                    kind: "ConfigMap",
                                    namespace,
                                    name: r.name.clone(),
                                    key: r.key.clone(),
                                });
                            }
                        },
                        None if r.optional == Some(true) => continue,
                        None => return Err(Error::ConfigMapNotFound(r.name.clone())),
                    }
                } else if let Some(r) = &from.secret_key_ref {
                    match sources.secret_data(&r.name) {
                        Some(d) => match d.get(&r.key) {
                            Some(v) => String::from_utf8_lossy(v).into_owned(),
                            None if r.optional == Some(true) => continue,
                            None => {
                                return Err(Error::KeyNotFound {
                                    kind: "Secret",
                                    namespace,
                                    name: r.name.clone(),
                                    key: r.key.clone(),
                                });
                            }
                        },
                        None if r.optional == Some(true) => continue,
                        None => return Err(Error::SecretNotFound(r.name.clone())),
                    }
                } else {
                    continue;
                }
            }
        };
        set(&mut env, var.name.clone(), value);
    }
    if !env.iter().any(|(k, _)| k == "POD_IP") {
        env.push(("POD_IP".into(), pod_ip.into()));
    }
    Ok(env)
}

/// A `fieldRef` value (the downward API fields Kubernetes allows in env).
pub fn field_value(pod: &Pod, path: &str, pod_ip: &str, host_ip: &str) -> Result<String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let keyed = |prefix: &str, map: Option<&BTreeMap<String, String>>| -> Option<String> {
        let key = path
            .strip_prefix(prefix)?
            .strip_prefix("['")?
            .strip_suffix("']")?;
        Some(map.and_then(|m| m.get(key)).cloned().unwrap_or_default())
    };
    let value = match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.podIP" | "status.podIPs" => pod_ip.to_string(),
        "status.hostIP" | "status.hostIPs" => host_ip.to_string(),
        _ => {
            if let Some(v) = keyed("metadata.labels", meta.labels.as_ref()) {
                v
            } else if let Some(v) = keyed("metadata.annotations", meta.annotations.as_ref()) {
                v
            } else {
                return Err(Error::UnsupportedField(path.to_string()));
            }
        }
    };
    Ok(value)
}

fn resource_value(
    pod: &Pod,
    container: &Container,
    r: &k8s_openapi::api::core::v1::ResourceFieldSelector,
) -> Result<String> {
    let target = match &r.container_name {
        Some(name) if !name.is_empty() => pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.iter().find(|c| &c.name == name))
            .unwrap_or(container),
        _ => container,
    };
    let (section, resource) = r
        .resource
        .split_once('.')
        .ok_or_else(|| Error::UnsupportedField(r.resource.clone()))?;
    let res = target.resources.as_ref();
    let map = match section {
        "limits" => res.and_then(|x| x.limits.as_ref()),
        "requests" => res.and_then(|x| x.requests.as_ref()),
        _ => return Err(Error::UnsupportedField(r.resource.clone())),
    };
    let divisor = r
        .divisor
        .as_ref()
        .and_then(|q| parse_quantity(&q.0))
        .filter(|d| *d > 0.0)
        .unwrap_or(1.0);
    let Some(q) = map.and_then(|m| m.get(resource)) else {
        // Kubernetes falls back to node allocatable; "0" is the honest answer here.
        return Ok("0".into());
    };
    let value = parse_quantity(&q.0).ok_or_else(|| Error::UnsupportedField(q.0.clone()))?;
    Ok(((value / divisor).ceil() as u64).to_string())
}

/// Expands `$(VAR)` from `vars`; `$$` is a literal `$`; unknown references stay as written.
pub fn expand(input: &str, vars: &BTreeMap<&str, &str>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(') {
            match inner.find(')') {
                Some(end) => {
                    let name = &inner[..end];
                    match vars.get(name) {
                        Some(v) => out.push_str(v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &inner[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = inner;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// A Kubernetes quantity as a number (`500m` → 0.5, `64Mi` → 67108864, `1e3` → 1000).
pub fn parse_quantity(q: &str) -> Option<f64> {
    let q = q.trim();
    let suffixes: [(&str, f64); 13] = [
        ("Ki", 1024f64),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
    ];
    for (suffix, factor) in suffixes {
        if let Some(num) = q.strip_suffix(suffix) {
            return num.parse::<f64>().ok().map(|n| n * factor);
        }
    }
    for (suffix, factor) in [("P", 1e15), ("E", 1e18)] {
        if let Some(num) = q.strip_suffix(suffix) {
            return num.parse::<f64>().ok().map(|n| n * factor);
        }
    }
    q.parse().ok()
}

/// The container's `resources.limits` for memory and cpu, and its cpu request (the limit when
/// only a limit is set, as the API defaults a request).
pub fn limits(container: &Container) -> Limits {
    let resources = container.resources.as_ref();
    let get = |name: &str| -> Option<&Quantity> { resources?.limits.as_ref()?.get(name) };
    let millis = |q: &Quantity| parse_quantity(&q.0).map(|v| (v * 1000.0).ceil() as u64);
    let cpu_millis = get("cpu").and_then(millis);
    let cpu_request_millis = resources
        .and_then(|r| r.requests.as_ref()?.get("cpu"))
        .and_then(millis)
        .or(cpu_millis);
    Limits {
        memory: get("memory")
            .and_then(|q| parse_quantity(&q.0))
            .map(|v| v as u64),
        cpu_millis,
        cpu_request_millis,
    }
}

/// The container's security settings: its `securityContext` over the pod's (`runAsUser`,
/// `runAsGroup` and `runAsNonRoot` may come from either; supplemental groups and `fsGroup` only
/// from the pod), as the Kubernetes kubelet merges them.
pub fn security(pod: &Pod, container: &Container) -> Security {
    let pod_sc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let sc = container.security_context.as_ref();
    let caps = sc.and_then(|s| s.capabilities.as_ref());
    let mut supplemental_groups: Vec<i64> = pod_sc
        .and_then(|p| p.supplemental_groups.clone())
        .unwrap_or_default();
    if let Some(fs_group) = pod_sc.and_then(|p| p.fs_group) {
        supplemental_groups.push(fs_group);
    }
    Security {
        run_as_user: sc
            .and_then(|s| s.run_as_user)
            .or_else(|| pod_sc.and_then(|p| p.run_as_user)),
        run_as_group: sc
            .and_then(|s| s.run_as_group)
            .or_else(|| pod_sc.and_then(|p| p.run_as_group)),
        run_as_non_root: sc
            .and_then(|s| s.run_as_non_root)
            .or_else(|| pod_sc.and_then(|p| p.run_as_non_root))
            .unwrap_or(false),
        supplemental_groups,
        read_only_root_filesystem: sc
            .and_then(|s| s.read_only_root_filesystem)
            .unwrap_or(false),
        privileged: sc.and_then(|s| s.privileged).unwrap_or(false),
        add_capabilities: caps.and_then(|c| c.add.clone()).unwrap_or_default(),
        drop_capabilities: caps.and_then(|c| c.drop.clone()).unwrap_or_default(),
        no_new_privileges: sc.and_then(|s| s.allow_privilege_escalation) == Some(false),
    }
}

/// An ephemeral container as the container it runs as: the fields the two share (its target
/// aside, which [`crate::runtime::ContainerConfig::target_id`] carries).
pub fn ephemeral_container(ec: &EphemeralContainer) -> Container {
    let mut value = serde_json::to_value(ec).unwrap_or(serde_json::Value::Null);
    if let Some(map) = value.as_object_mut() {
        map.remove("targetContainerName");
    }
    serde_json::from_value(value).unwrap_or_else(|_| Container {
        name: ec.name.clone(),
        ..Default::default()
    })
}

/// Whether `name` is one of the pod's containers: a regular, init or ephemeral one (what
/// `kubectl logs`, `exec` and `attach` may name).
pub fn has_container(spec: &PodSpec, name: &str) -> bool {
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .any(|c| c.name == name)
        || spec
            .ephemeral_containers
            .iter()
            .flatten()
            .any(|c| c.name == name)
}

/// A hash of the container spec: a change restarts the container. Probes are left out (a
/// probe change does not restart in Kubernetes either).
pub fn spec_hash(container: &Container) -> String {
    let mut c = container.clone();
    c.liveness_probe = None;
    c.readiness_probe = None;
    c.startup_probe = None;
    let bytes = serde_json::to_vec(&c).expect("container spec serializes");
    hex::encode(&Sha256::digest(&bytes)[..8])
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{
        ConfigMapEnvSource, ConfigMapKeySelector, EnvFromSource, EnvVar, EnvVarSource,
        ObjectFieldSelector, PodSpec, ResourceFieldSelector, ResourceRequirements,
        SecretKeySelector,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(container: Container) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns1".into()),
                uid: Some("u-1".into()),
                labels: Some(BTreeMap::from([("app".into(), "demo".into())])),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("n1".into()),
                containers: vec![container],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn var(name: &str, value: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: Some(value.into()),
            value_from: None,
        }
    }

    fn from(name: &str, source: EnvVarSource) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: None,
            value_from: Some(source),
        }
    }

    fn sources() -> Sources {
        let mut s = Sources::default();
        s.config_maps.insert(
            "cfg".into(),
            ConfigMap {
                data: Some(BTreeMap::from([
                    ("mode".into(), "fast".into()),
                    ("level".into(), "3".into()),
                ])),
                ..Default::default()
            },
        );
        s.secrets.insert(
            "sec".into(),
            Secret {
                data: Some(BTreeMap::from([(
                    "password".into(),
                    ByteString(b"hunter2".to_vec()),
                )])),
                ..Default::default()
            },
        );
        s
    }

    #[test]
    fn env_resolves_all_sources_in_order() {
        let c = Container {
            name: "c".into(),
            env_from: Some(vec![EnvFromSource {
                config_map_ref: Some(ConfigMapEnvSource {
                    name: "cfg".into(),
                    optional: None,
                }),
                prefix: Some("CFG_".into()),
                secret_ref: None,
            }]),
            env: Some(vec![
                var("A", "one"),
                var("B", "$(A)-two-$(MISSING)-$$(A)"),
                from(
                    "NAME",
                    EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: "metadata.name".into(),
                            api_version: None,
                        }),
                        ..Default::default()
                    },
                ),
                from(
                    "APP",
                    EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: "metadata.labels['app']".into(),
                            api_version: None,
                        }),
                        ..Default::default()
                    },
                ),
                from(
                    "IP",
                    EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            field_path: "status.podIP".into(),
                            api_version: None,
                        }),
                        ..Default::default()
                    },
                ),
                from(
                    "MODE",
                    EnvVarSource {
                        config_map_key_ref: Some(ConfigMapKeySelector {
                            name: "cfg".into(),
                            key: "mode".into(),
                            optional: None,
                        }),
                        ..Default::default()
                    },
                ),
                from(
                    "PW",
                    EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: "sec".into(),
                            key: "password".into(),
                            optional: None,
                        }),
                        ..Default::default()
                    },
                ),
                from(
                    "MEM",
                    EnvVarSource {
                        resource_field_ref: Some(ResourceFieldSelector {
                            resource: "limits.memory".into(),
                            divisor: Some(Quantity("1Mi".into())),
                            container_name: None,
                        }),
                        ..Default::default()
                    },
                ),
                var("CFG_mode", "overridden"),
            ]),
            resources: Some(ResourceRequirements {
                limits: Some(BTreeMap::from([("memory".into(), Quantity("64Mi".into()))])),
                ..Default::default()
            }),
            ..Default::default()
        };
        let p = pod(c.clone());
        let env = resolve_env(&p, &c, "127.100.0.5", "127.0.0.1", &sources()).unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("CFG_level"), Some("3"));
        assert_eq!(get("CFG_mode"), Some("overridden"));
        assert_eq!(get("B"), Some("one-two-$(MISSING)-$(A)"));
        assert_eq!(get("NAME"), Some("web"));
        assert_eq!(get("APP"), Some("demo"));
        assert_eq!(get("IP"), Some("127.100.0.5"));
        assert_eq!(get("MODE"), Some("fast"));
        assert_eq!(get("PW"), Some("hunter2"));
        assert_eq!(get("MEM"), Some("64"));
        assert_eq!(get("POD_IP"), Some("127.100.0.5"));
        assert_eq!(env[0].0, "CFG_level", "envFrom first, in key order");
    }

    #[test]
    fn missing_sources_fail_unless_optional() {
        let cm_ref = |optional| {
            from(
                "X",
                EnvVarSource {
                    config_map_key_ref: Some(ConfigMapKeySelector {
                        name: "nope".into(),
                        key: "k".into(),
                        optional,
                    }),
                    ..Default::default()
                },
            )
        };
        let c = Container {
            name: "c".into(),
            env: Some(vec![cm_ref(None)]),
            ..Default::default()
        };
        let err = resolve_env(&pod(c.clone()), &c, "", "", &sources()).unwrap_err();
        assert_eq!(err, Error::ConfigMapNotFound("nope".into()));
        let c = Container {
            name: "c".into(),
            env: Some(vec![cm_ref(Some(true))]),
            ..Default::default()
        };
        let env = resolve_env(&pod(c.clone()), &c, "1.2.3.4", "", &sources()).unwrap();
        assert_eq!(env, vec![("POD_IP".to_string(), "1.2.3.4".to_string())]);
        let c = Container {
            name: "c".into(),
            env: Some(vec![from(
                "X",
                EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: "sec".into(),
                        key: "absent".into(),
                        optional: None,
                    }),
                    ..Default::default()
                },
            )]),
            ..Default::default()
        };
        assert!(matches!(
            resolve_env(&pod(c.clone()), &c, "", "", &sources()),
            Err(Error::KeyNotFound { kind: "Secret", .. })
        ));
        assert!(matches!(
            field_value(&pod(c), "status.phase", "", ""),
            Err(Error::UnsupportedField(_))
        ));
    }

    #[test]
    fn quantities_and_limits() {
        assert_eq!(parse_quantity("500m"), Some(0.5));
        assert_eq!(parse_quantity("64Mi"), Some(67108864.0));
        assert_eq!(parse_quantity("2"), Some(2.0));
        assert_eq!(parse_quantity("1G"), Some(1e9));
        assert_eq!(parse_quantity("x"), None);
        let c = Container {
            resources: Some(ResourceRequirements {
                limits: Some(BTreeMap::from([
                    ("memory".into(), Quantity("128Mi".into())),
                    ("cpu".into(), Quantity("250m".into())),
                ])),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            limits(&c),
            Limits {
                memory: Some(128 << 20),
                cpu_millis: Some(250),
                // No request: the limit, as the API defaults it.
                cpu_request_millis: Some(250),
            }
        );
        let requested = Container {
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([("cpu".into(), Quantity("0.1".into()))])),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            limits(&requested),
            Limits {
                memory: None,
                cpu_millis: None,
                cpu_request_millis: Some(100),
            }
        );
        assert_eq!(limits(&Container::default()), Limits::default());
    }

    #[test]
    fn spec_hash_changes_with_spec_but_not_with_probes() {
        let c = Container {
            name: "c".into(),
            image: Some("busybox".into()),
            ..Default::default()
        };
        let mut changed = c.clone();
        changed.args = Some(vec!["x".into()]);
        let mut probed = c.clone();
        probed.readiness_probe = Some(Default::default());
        assert_ne!(spec_hash(&c), spec_hash(&changed));
        assert_eq!(spec_hash(&c), spec_hash(&probed));
    }

    #[test]
    fn referenced_lists_each_source_once() {
        let c = Container {
            name: "c".into(),
            env: Some(vec![from(
                "PW",
                EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: "sec".into(),
                        key: "password".into(),
                        optional: None,
                    }),
                    ..Default::default()
                },
            )]),
            env_from: Some(vec![EnvFromSource {
                config_map_ref: Some(ConfigMapEnvSource {
                    name: "cfg".into(),
                    optional: None,
                }),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let mut p = pod(c.clone());
        p.spec.as_mut().unwrap().containers.push(c);
        assert_eq!(
            Sources::referenced(&p),
            vec![
                ("ConfigMap", "cfg".to_string()),
                ("Secret", "sec".to_string())
            ]
        );
    }

    #[test]
    fn the_containers_security_context_over_the_pods() {
        use k8s_openapi::api::core::v1::{Capabilities, PodSecurityContext, SecurityContext};
        let mut p = pod(Container {
            name: "c".into(),
            security_context: Some(SecurityContext {
                run_as_user: Some(1000),
                read_only_root_filesystem: Some(true),
                allow_privilege_escalation: Some(false),
                capabilities: Some(Capabilities {
                    add: Some(vec!["NET_BIND_SERVICE".into()]),
                    drop: Some(vec!["ALL".into()]),
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        p.spec.as_mut().unwrap().security_context = Some(PodSecurityContext {
            run_as_user: Some(5),
            run_as_group: Some(3000),
            run_as_non_root: Some(true),
            supplemental_groups: Some(vec![4000]),
            fs_group: Some(2000),
            ..Default::default()
        });
        let c = p.spec.as_ref().unwrap().containers[0].clone();
        assert_eq!(
            security(&p, &c),
            Security {
                run_as_user: Some(1000),
                run_as_group: Some(3000),
                run_as_non_root: true,
                supplemental_groups: vec![4000, 2000],
                read_only_root_filesystem: true,
                privileged: false,
                add_capabilities: vec!["NET_BIND_SERVICE".into()],
                drop_capabilities: vec!["ALL".into()],
                no_new_privileges: true,
            }
        );
        // allowPrivilegeEscalation left out does not set no_new_privs; nothing set is nothing.
        let bare = Container::default();
        assert_eq!(security(&pod(bare.clone()), &bare), Security::default());
    }
}
