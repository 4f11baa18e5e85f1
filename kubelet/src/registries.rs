//! The node's registry configuration, in the spirit of k3s's `registries.yaml`
//! (`<data-dir>/registries.yaml` under `skiff server`, `--registry-config` otherwise):
//!
//! ```yaml
//! mirrors:
//!   docker.io:                       # the registry an image names
//!     endpoint: ["http://10.0.0.5:5000", "https://mirror.example"]
//! configs:
//!   "10.0.0.5:5000":                 # a registry or mirror host
//!     auth: {username: u, password: p}
//!     tls: {insecure_skip_verify: true}
//! ```
//!
//! Mirrors and TLS settings become containerd's hosts configuration: one `hosts.toml` per
//! registry in the directory containerd's CRI plugin reads (its `registry.config_path`, given to
//! the kubelet as `--registry-hosts-dir`), which containerd reads on every pull. Credentials go
//! with each pull (CRI `AuthConfig`), after those of the pod's `imagePullSecrets`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::pull_secrets::split_image;
use crate::runtime::RegistryAuth;

/// First line of every `hosts.toml` written here: a file without it is not ours to replace.
pub const MARKER: &str = "# written by skiff from its registries.yaml";

/// Why the registry configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a registries.yaml.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
}

/// A registries.yaml.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct Registries {
    /// Mirrors by the registry host images name.
    #[serde(default)]
    pub mirrors: BTreeMap<String, Mirror>,
    /// Settings by registry (or mirror) host.
    #[serde(default)]
    pub configs: BTreeMap<String, HostConfig>,
}

/// The endpoints that serve a registry's images, tried in order before the registry itself.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct Mirror {
    /// `http://host:port` (plain HTTP) or `https://host` URLs; a bare host is HTTPS.
    #[serde(default)]
    pub endpoint: Vec<String>,
}

/// Settings of one host.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct HostConfig {
    /// Its credentials.
    #[serde(default)]
    pub auth: Option<Auth>,
    /// Its TLS settings.
    #[serde(default)]
    pub tls: Option<Tls>,
}

/// Credentials of a host.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct Auth {
    /// User.
    #[serde(default)]
    pub username: String,
    /// Password.
    #[serde(default)]
    pub password: String,
}

/// TLS settings of a host.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct Tls {
    /// Do not verify the host's certificate.
    #[serde(default)]
    pub insecure_skip_verify: bool,
    /// A CA bundle to verify it with.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
}

/// The host of an endpoint URL (`http://h:p/x` -> `h:p`).
fn endpoint_host(endpoint: &str) -> &str {
    let rest = endpoint.split_once("://").map_or(endpoint, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest)
}

/// An endpoint as a URL (a bare host is HTTPS).
fn endpoint_url(endpoint: &str) -> String {
    let url = if endpoint.contains("://") {
        endpoint.to_string()
    } else {
        format!("https://{endpoint}")
    };
    url.trim_end_matches('/').to_string()
}

impl Registries {
    /// Parses registries.yaml text.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        serde_saphyr::from_str(text).map_err(|e| e.to_string())
    }

    /// Reads `path`; `None` when there is no such file.
    pub fn load(path: &Path) -> Result<Option<Self>, Error> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text)
                .map(Some)
                .map_err(|message| Error::Parse {
                    path: path.to_path_buf(),
                    message,
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(Error::Io {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// The `hosts.toml` of each registry it configures (mirrored, or with TLS settings), by
    /// directory name (the host).
    pub fn hosts_files(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let mut hosts: Vec<&String> = self.mirrors.keys().collect();
        hosts.extend(
            self.configs
                .keys()
                .filter(|h| self.configs[*h].tls.is_some() && !self.mirrors.contains_key(*h)),
        );
        for host in hosts {
            let server = if host == "docker.io" {
                "https://registry-1.docker.io".to_string()
            } else {
                endpoint_url(host)
            };
            let mut text = format!("{MARKER}\nserver = {server:?}\n");
            let endpoints = self
                .mirrors
                .get(host)
                .map(|m| m.endpoint.clone())
                .unwrap_or_default();
            for endpoint in &endpoints {
                let url = endpoint_url(endpoint);
                let _ = write!(
                    text,
                    "\n[host.{url:?}]\n  capabilities = [\"pull\", \"resolve\"]\n"
                );
                self.write_tls(&mut text, endpoint_host(endpoint));
            }
            if let Some(tls) = self.configs.get(host).and_then(|c| c.tls.as_ref()) {
                // The registry's own TLS settings, at the top level (for `server`).
                let mut own = String::new();
                if tls.insecure_skip_verify {
                    own.push_str("skip_verify = true\n");
                }
                if let Some(ca) = &tls.ca_file {
                    let _ = writeln!(own, "ca = {:?}", ca.display().to_string());
                }
                text = text.replacen(
                    &format!("server = {server:?}\n"),
                    &format!("server = {server:?}\n{own}"),
                    1,
                );
            }
            out.insert(host.replace('/', "_"), text);
        }
        out
    }

    fn write_tls(&self, text: &mut String, host: &str) {
        if let Some(tls) = self.configs.get(host).and_then(|c| c.tls.as_ref()) {
            if tls.insecure_skip_verify {
                text.push_str("  skip_verify = true\n");
            }
            if let Some(ca) = &tls.ca_file {
                let _ = writeln!(text, "  ca = {:?}", ca.display().to_string());
            }
        }
    }

    /// Writes [`Registries::hosts_files`] under `dir` (`<dir>/<host>/hosts.toml`), leaving alone
    /// a file it did not write (one without [`MARKER`]); the hosts written.
    pub fn write_hosts(&self, dir: &Path) -> Result<Vec<String>, Error> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::Io { path, source }
        };
        let mut written = Vec::new();
        for (host, text) in self.hosts_files() {
            let host_dir = dir.join(&host);
            let file = host_dir.join("hosts.toml");
            if let Ok(existing) = std::fs::read_to_string(&file)
                && !existing.starts_with(MARKER)
            {
                tracing::warn!(file = %file.display(), "not replacing a hosts.toml skiff did not write");
                continue;
            }
            std::fs::create_dir_all(&host_dir).map_err(io(&host_dir))?;
            std::fs::write(&file, text).map_err(io(&file))?;
            written.push(host);
        }
        Ok(written)
    }

    /// Credentials for pulling `image`: those of its registry, then of its mirrors' hosts.
    pub fn auth_for(&self, image: &str) -> Vec<RegistryAuth> {
        let (host, _) = split_image(image);
        let mut hosts = vec![host.clone()];
        if let Some(m) = self.mirrors.get(&host) {
            hosts.extend(m.endpoint.iter().map(|e| endpoint_host(e).to_string()));
        }
        hosts
            .iter()
            .filter_map(|h| {
                let auth = self.configs.get(h)?.auth.as_ref()?;
                Some(RegistryAuth {
                    server: h.clone(),
                    username: auth.username.clone(),
                    password: auth.password.clone(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = r#"
mirrors:
  docker.io:
    endpoint: ["http://127.0.0.1:5000", "mirror.example"]
  mirror.skiff.test:
    endpoint: ["http://127.0.0.1:5001"]
configs:
  "127.0.0.1:5001":
    auth: {username: u, password: p}
  mirror.example:
    tls: {insecure_skip_verify: true}
  private.example:
    auth: {username: v, password: q}
    tls: {insecure_skip_verify: true, ca_file: /etc/ca.pem}
"#;

    #[test]
    fn mirrors_and_tls_become_hosts_files() {
        let r = Registries::parse(YAML).unwrap();
        let files = r.hosts_files();
        assert_eq!(
            files.keys().collect::<Vec<_>>(),
            // Every mirrored registry, and every registry with a config of its own (pulled
            // directly, it still needs its TLS settings).
            [
                "docker.io",
                "mirror.example",
                "mirror.skiff.test",
                "private.example"
            ]
        );
        assert_eq!(
            files["mirror.example"],
            format!("{MARKER}\nserver = \"https://mirror.example\"\nskip_verify = true\n")
        );
        assert_eq!(
            files["docker.io"],
            format!(
                "{MARKER}\nserver = \"https://registry-1.docker.io\"\n\n\
                 [host.\"http://127.0.0.1:5000\"]\n  capabilities = [\"pull\", \"resolve\"]\n\n\
                 [host.\"https://mirror.example\"]\n  capabilities = [\"pull\", \"resolve\"]\n  skip_verify = true\n"
            )
        );
        assert_eq!(
            files["private.example"],
            format!(
                "{MARKER}\nserver = \"https://private.example\"\nskip_verify = true\nca = \"/etc/ca.pem\"\n"
            )
        );
    }

    #[test]
    fn credentials_of_the_registry_and_its_mirrors() {
        let r = Registries::parse(YAML).unwrap();
        let users = |image: &str| -> Vec<String> {
            r.auth_for(image).into_iter().map(|a| a.username).collect()
        };
        assert_eq!(users("mirror.skiff.test/app:1"), ["u"]);
        assert_eq!(users("private.example/x"), ["v"]);
        assert!(users("nginx").is_empty());
    }

    #[test]
    fn files_skiff_did_not_write_are_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let theirs = dir.path().join("docker.io/hosts.toml");
        std::fs::create_dir_all(theirs.parent().unwrap()).unwrap();
        std::fs::write(&theirs, "server = \"https://theirs\"\n").unwrap();
        let r = Registries::parse(YAML).unwrap();
        let written = r.write_hosts(dir.path()).unwrap();
        assert_eq!(
            written,
            ["mirror.example", "mirror.skiff.test", "private.example"]
        );
        assert_eq!(
            std::fs::read_to_string(&theirs).unwrap(),
            "server = \"https://theirs\"\n"
        );
        // Ours are rewritten on the next start.
        assert_eq!(r.write_hosts(dir.path()).unwrap().len(), 3);
    }

    #[test]
    fn bad_and_missing_files() {
        assert!(Registries::parse("mirrors: [1, 2]").is_err());
        assert_eq!(Registries::parse("").unwrap(), Registries::default());
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            Registries::load(&dir.path().join("none.yaml")).unwrap(),
            None
        );
    }
}
