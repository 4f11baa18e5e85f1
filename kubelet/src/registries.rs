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

mod config;

use std::path::{Path, PathBuf};

use config::endpoint_host;
pub use config::{Auth, HostConfig, MARKER, Mirror, Registries, Tls};

use crate::pull_secrets::split_image;
use crate::runtime::RegistryAuth;

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

impl Registries {
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
                 [host.\"http://127.0.0.1:5000\"]\ncapabilities = [\"pull\", \"resolve\"]\n\n\
                 [host.\"https://mirror.example\"]\ncapabilities = [\"pull\", \"resolve\"]\nskip_verify = true\n"
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

    /// Quotes, backslashes and control characters in what the YAML says stay what they are in
    /// the TOML (Rust's `{:?}` escaping, which this once used, writes `\u{7}`: not TOML).
    #[test]
    fn what_the_yaml_says_comes_back_out_of_the_toml() {
        let r = Registries::parse(
            "mirrors:\n  docker.io:\n    endpoint: [\"http://q\\\"uote\\u0007bell:5000/\"]\n\
             configs:\n  docker.io:\n    tls: {ca_file: \"C:\\\\ca \\\"x\\\".pem\"}\n",
        )
        .unwrap();
        let files = r.hosts_files();
        let doc: toml_edit::DocumentMut = files["docker.io"].parse().expect("TOML");
        assert_eq!(doc["server"].as_str(), Some("https://registry-1.docker.io"));
        assert_eq!(doc["ca"].as_str(), Some("C:\\ca \"x\".pem"));
        let hosts: Vec<&str> = doc["host"]
            .as_table()
            .unwrap()
            .iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(hosts, ["http://q\"uote\u{7}bell:5000"]);
    }

    #[test]
    fn a_host_that_is_not_one_directory_is_refused() {
        for bad in ["..", ".", "", "a/b", "a\\b", "a b", "x\u{1b}"] {
            let quoted = serde_json::to_string(bad).unwrap();
            for yaml in [
                format!("mirrors:\n  {quoted}:\n    endpoint: []\n"),
                format!("configs:\n  {quoted}:\n    tls: {{insecure_skip_verify: true}}\n"),
            ] {
                let err = Registries::parse(&yaml).unwrap_err();
                assert!(err.contains("is not a registry host"), "{yaml}: {err}");
            }
        }
        assert!(Registries::parse("mirrors:\n  \"10.0.0.5:5000\": {}\n").is_ok());
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
