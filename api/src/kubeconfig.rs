//! Writing kubeconfig files: one cluster (server URL and CA), one token user, one context that
//! is current, so `kubectl --kubeconfig F ...` works as written.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// Errors of writing a kubeconfig.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file or its directory could not be written.
    #[error("cannot write the kubeconfig {path}")]
    Io {
        /// The kubeconfig path.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The document could not be rendered as YAML.
    #[error("cannot render the kubeconfig as YAML")]
    Render(#[from] serde_saphyr::SerializeError),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a kubeconfig says.
#[derive(Debug, Clone, Copy)]
pub struct Params<'a> {
    /// Name of the cluster, the user and the context (`skiff`).
    pub name: &'a str,
    /// The API server URL (`https://127.0.0.1:6443`).
    pub server: &'a str,
    /// The CA certificate (PEM) the server's certificate chains to.
    pub ca_pem: &'a str,
    /// The bearer token.
    pub token: &'a str,
    /// The context's default namespace, if any.
    pub namespace: Option<&'a str>,
}

/// The kubeconfig document as JSON (the YAML is rendered from it).
pub fn document(params: &Params<'_>) -> serde_json::Value {
    let mut context = serde_json::json!({
        "cluster": params.name,
        "user": params.name,
    });
    if let Some(namespace) = params.namespace {
        context["namespace"] = namespace.into();
    }
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{
            "name": params.name,
            "cluster": {
                "server": params.server,
                "certificate-authority-data": STANDARD.encode(params.ca_pem.as_bytes()),
            },
        }],
        "users": [{
            "name": params.name,
            "user": { "token": params.token },
        }],
        "contexts": [{
            "name": params.name,
            "context": context,
        }],
        "current-context": params.name,
    })
}

/// The kubeconfig as YAML.
pub fn render(params: &Params<'_>) -> Result<String> {
    Ok(serde_saphyr::to_string(&document(params))?)
}

/// Writes the kubeconfig to `path` (mode 0600, atomically), creating its directory.
pub fn write(path: &Path, params: &Params<'_>) -> Result<()> {
    let yaml = render(params)?;
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        crate::tls::create_dir_all_durably(parent, 0o777).map_err(io)?;
    }
    crate::tls::write_atomically(path, yaml.as_bytes(), 0o600).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::testing::TempDir;
    use std::os::unix::fs::PermissionsExt as _;

    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    #[test]
    fn written_kubeconfig_parses_back() {
        let dir = TempDir::new("kubeconfig");
        let path = dir.0.join("nested").join("admin.kubeconfig");
        let params = Params {
            name: "skiff",
            server: "https://127.0.0.1:6443",
            ca_pem: CA,
            token: "abc123",
            namespace: Some("default"),
        };
        write(&path, &params).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);

        let text = std::fs::read_to_string(&path).unwrap();
        let parsed: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(parsed, document(&params));
        assert_eq!(parsed["current-context"], "skiff");
        assert_eq!(parsed["contexts"][0]["context"]["cluster"], "skiff");
        assert_eq!(parsed["contexts"][0]["context"]["namespace"], "default");
        assert_eq!(parsed["users"][0]["user"]["token"], "abc123");
        let cluster = &parsed["clusters"][0]["cluster"];
        assert_eq!(cluster["server"], "https://127.0.0.1:6443");
        let ca = STANDARD
            .decode(cluster["certificate-authority-data"].as_str().unwrap())
            .unwrap();
        assert_eq!(ca, CA.as_bytes());
    }

    #[test]
    fn rewriting_replaces_the_file() {
        let dir = TempDir::new("kubeconfig-rewrite");
        let path = dir.0.join("k");
        let mut params = Params {
            name: "skiff",
            server: "https://127.0.0.1:6443",
            ca_pem: CA,
            token: "first",
            namespace: None,
        };
        write(&path, &params).unwrap();
        params.token = "second";
        write(&path, &params).unwrap();
        let parsed: serde_json::Value =
            serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(parsed["users"][0]["user"]["token"], "second");
        assert!(parsed["contexts"][0]["context"].get("namespace").is_none());
    }

    #[test]
    fn an_unwritable_path_is_an_error() {
        let dir = TempDir::new("kubeconfig-bad");
        let blocker = dir.0.join("file");
        std::fs::write(&blocker, "x").unwrap();
        let params = Params {
            name: "skiff",
            server: "https://127.0.0.1:6443",
            ca_pem: CA,
            token: "t",
            namespace: None,
        };
        // A regular file where a directory should be.
        let err = write(&blocker.join("kubeconfig"), &params).unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{err:?}");
    }
}
