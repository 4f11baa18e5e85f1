//! What a pod needs to talk to the API as its service account: the tokens of its projected
//! volumes (asked for by TokenRequest, bound to the pod, cached and refreshed before 80% of their
//! lifetime or after 24 hours, as the Kubernetes kubelet's token manager does) and the
//! `kubernetes` Service's environment variables (`KUBERNETES_SERVICE_HOST` and the rest), which
//! every container gets.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, Service, ServiceAccount};
use skiff_client::api::PostParams;
use skiff_client::{Api, Client};

/// A token older than this is refreshed whatever its lifetime.
const MAX_TOKEN_AGE_SECONDS: i64 = 24 * 3600;

/// Whether a token issued at `issued` and expiring at `expires` (seconds) needs replacing at
/// `now`: within the last 20% of its lifetime (whole seconds, as the kubelet's token manager
/// counts them), or older than a day.
pub fn requires_refresh(now: i64, issued: i64, expires: i64) -> bool {
    let lifetime = (expires - issued).max(0);
    now >= expires - lifetime * 2 / 10 || now - issued > MAX_TOKEN_AGE_SECONDS
}

/// The environment variables of the `kubernetes` Service as the kubelet sets them for its
/// first port (`KUBERNETES_SERVICE_HOST`, `_PORT`, `_PORT_HTTPS`, `KUBERNETES_PORT`, ...).
pub fn service_env(service: &Service) -> Vec<(String, String)> {
    let Some(spec) = &service.spec else {
        return Vec::new();
    };
    let Some(ip) = spec
        .cluster_ip
        .as_deref()
        .filter(|ip| !ip.is_empty() && *ip != "None")
    else {
        return Vec::new();
    };
    let ports = spec.ports.as_deref().unwrap_or_default();
    let Some(first) = ports.first() else {
        return Vec::new();
    };
    let prefix = service
        .metadata
        .name
        .as_deref()
        .unwrap_or_default()
        .to_ascii_uppercase()
        .replace('-', "_");
    let mut env = vec![
        (format!("{prefix}_SERVICE_HOST"), ip.to_string()),
        (format!("{prefix}_SERVICE_PORT"), first.port.to_string()),
    ];
    for port in ports {
        if let Some(name) = port.name.as_deref().filter(|n| !n.is_empty()) {
            env.push((
                format!(
                    "{prefix}_SERVICE_PORT_{}",
                    name.to_ascii_uppercase().replace('-', "_")
                ),
                port.port.to_string(),
            ));
        }
    }
    let protocol = |p: &k8s_openapi::api::core::v1::ServicePort| {
        p.protocol.clone().unwrap_or_else(|| "TCP".into())
    };
    env.push((
        format!("{prefix}_PORT"),
        format!(
            "{}://{ip}:{}",
            protocol(first).to_ascii_lowercase(),
            first.port
        ),
    ));
    for port in ports {
        let proto = protocol(port);
        let base = format!("{prefix}_PORT_{}_{}", port.port, proto.to_ascii_uppercase());
        env.push((
            base.clone(),
            format!("{}://{ip}:{}", proto.to_ascii_lowercase(), port.port),
        ));
        env.push((format!("{base}_PROTO"), proto.to_ascii_lowercase()));
        env.push((format!("{base}_PORT"), port.port.to_string()));
        env.push((format!("{base}_ADDR"), ip.to_string()));
    }
    env
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    namespace: String,
    account: String,
    pod_uid: String,
    audience: String,
    expiration: i64,
}

#[derive(Clone)]
struct Cached {
    token: String,
    issued: i64,
    expires: i64,
}

/// TokenRequests for pods' projected tokens, with a cache.
pub struct Tokens {
    client: Client,
    cache: Mutex<HashMap<Key, Cached>>,
}

fn now() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second()
}

impl Tokens {
    /// A token manager asking through `client`.
    pub fn new(client: Client) -> Tokens {
        Tokens {
            client,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// A token of `pod`'s service account bound to the pod, for `audience` (empty: the API
    /// server's) living `expiration` seconds: the cached one while fresh, else a new one.
    pub async fn token(
        &self,
        pod: &Pod,
        audience: &str,
        expiration: i64,
    ) -> Result<String, String> {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let account = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "default".into());
        let key = Key {
            namespace: namespace.clone(),
            account: account.clone(),
            pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
            audience: audience.to_string(),
            expiration,
        };
        let cached = self.lock().get(&key).cloned();
        if let Some(c) = &cached
            && !requires_refresh(now(), c.issued, c.expires)
        {
            return Ok(c.token.clone());
        }
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: if audience.is_empty() {
                    Vec::new()
                } else {
                    vec![audience.to_string()]
                },
                expiration_seconds: Some(expiration),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: pod.metadata.name.clone(),
                    uid: pod.metadata.uid.clone(),
                }),
            },
            ..Default::default()
        };
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &namespace);
        let issued = now();
        match accounts
            .create_token_request(&account, &PostParams::default(), &request)
            .await
        {
            Ok(answer) => {
                let Some(status) = answer.status else {
                    return Err("the TokenRequest came back without a token".into());
                };
                let expires = status.expiration_timestamp.0.as_second();
                let mut cache = self.lock();
                // Tokens of pods long gone have expired: forget them.
                let t = now();
                cache.retain(|_, c| c.expires > t);
                cache.insert(
                    key,
                    Cached {
                        token: status.token.clone(),
                        issued,
                        expires,
                    },
                );
                Ok(status.token)
            }
            // A token that is still valid keeps serving while the API cannot be reached.
            Err(e) => match cached.filter(|c| now() < c.expires) {
                Some(c) => {
                    tracing::warn!(error = %e, pod = ?pod.metadata.name, "cannot refresh a service account token; keeping the current one");
                    Ok(c.token)
                }
                None => Err(format!("failed to fetch token: {e}")),
            },
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Cached>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The `kubernetes` Service's environment, read from the API (empty when it cannot be read).
pub async fn kubernetes_service_env(client: &Client) -> Vec<(String, String)> {
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    match services.get_opt("kubernetes").await {
        Ok(Some(service)) => service_env(&service),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn tokens_are_refreshed_at_eighty_percent_or_after_a_day() {
        assert!(!requires_refresh(1000, 1000, 1000 + 3607));
        assert!(!requires_refresh(1000 + 2885, 1000, 1000 + 3607));
        assert!(requires_refresh(1000 + 2886, 1000, 1000 + 3607));
        let year = 365 * 24 * 3600;
        assert!(!requires_refresh(1000 + 3600, 1000, 1000 + year));
        assert!(requires_refresh(1000 + 24 * 3600 + 1, 1000, 1000 + year));
    }

    #[test]
    fn the_kubernetes_service_becomes_kubelets_variables() {
        let service = Service {
            metadata: ObjectMeta {
                name: Some("kubernetes".into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: Some("127.96.0.1".into()),
                ports: Some(vec![ServicePort {
                    name: Some("https".into()),
                    port: 443,
                    protocol: Some("TCP".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let env: std::collections::BTreeMap<String, String> =
            service_env(&service).into_iter().collect();
        let want = [
            ("KUBERNETES_SERVICE_HOST", "127.96.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
            ("KUBERNETES_PORT", "tcp://127.96.0.1:443"),
            ("KUBERNETES_PORT_443_TCP", "tcp://127.96.0.1:443"),
            ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
            ("KUBERNETES_PORT_443_TCP_PORT", "443"),
            ("KUBERNETES_PORT_443_TCP_ADDR", "127.96.0.1"),
        ];
        assert_eq!(env.len(), want.len());
        for (k, v) in want {
            assert_eq!(env[k], v, "{k}");
        }
        let mut headless = service.clone();
        headless.spec.as_mut().unwrap().cluster_ip = Some("None".into());
        assert!(service_env(&headless).is_empty());
    }
}
