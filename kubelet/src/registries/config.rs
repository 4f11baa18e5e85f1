//! The pure half of [`crate::registries`]: the registries.yaml document, its parser and the
//! `hosts.toml` files it becomes, with nothing from the rest of the kubelet (the fuzz targets
//! compile this file on its own: `fuzz-targets/src/files.rs`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use toml_edit::{Array, DocumentMut, Item, Table, value};

/// First line of every `hosts.toml` written here: a file without it is not ours to replace.
pub const MARKER: &str = "# written by skiff from its registries.yaml";

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
pub fn endpoint_host(endpoint: &str) -> &str {
    let rest = endpoint.split_once("://").map_or(endpoint, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest)
}

/// An endpoint as a URL (a bare host is HTTPS).
pub fn endpoint_url(endpoint: &str) -> String {
    let url = if endpoint.contains("://") {
        endpoint.to_string()
    } else {
        format!("https://{endpoint}")
    };
    url.trim_end_matches('/').to_string()
}

/// The URL containerd pulls `host`'s images from when no mirror answers.
pub fn server_url(host: &str) -> String {
    if host == "docker.io" {
        "https://registry-1.docker.io".to_string()
    } else {
        endpoint_url(host)
    }
}

/// Refuses a host that cannot name a directory of its own under containerd's hosts dir (its
/// `hosts.toml` goes to `<dir>/<host>/`): empty, `.`, `..`, or with a slash, a backslash,
/// whitespace or a control character.
fn check_host(section: &str, host: &str) -> Result<(), String> {
    let bad = host.is_empty()
        || host == "."
        || host == ".."
        || host
            .chars()
            .any(|c| c == '/' || c == '\\' || c.is_whitespace() || c.is_control());
    if bad {
        return Err(format!(
            "{section}: {host:?} is not a registry host (host or host:port)"
        ));
    }
    Ok(())
}

impl Registries {
    /// Parses registries.yaml text.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        let registries: Registries = serde_saphyr::from_str(text).map_err(|e| e.to_string())?;
        for host in registries.mirrors.keys() {
            check_host("mirrors", host)?;
        }
        for host in registries.configs.keys() {
            check_host("configs", host)?;
        }
        Ok(registries)
    }

    /// The `hosts.toml` of each registry it configures (mirrored, or with TLS settings), by
    /// directory name (the host). Mirrors come first, in their order, as `[host."<url>"]`
    /// tables; containerd tries them in that order, then the registry (`server`).
    pub fn hosts_files(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let mut hosts: Vec<&String> = self.mirrors.keys().collect();
        hosts.extend(
            self.configs
                .keys()
                .filter(|h| self.configs[*h].tls.is_some() && !self.mirrors.contains_key(*h)),
        );
        for host in hosts {
            let mut doc = DocumentMut::new();
            doc["server"] = value(server_url(host));
            // The registry's own TLS settings, at the top level (for `server`).
            self.write_tls(doc.as_table_mut(), host);
            let endpoints = self.mirrors.get(host).map(|m| m.endpoint.as_slice());
            let mut mirrors = Table::new();
            mirrors.set_implicit(true);
            for endpoint in endpoints.unwrap_or_default() {
                let mut table = Table::new();
                table["capabilities"] = value(Array::from_iter(["pull", "resolve"]));
                self.write_tls(&mut table, endpoint_host(endpoint));
                mirrors.insert(&endpoint_url(endpoint), Item::Table(table));
            }
            if !mirrors.is_empty() {
                doc["host"] = Item::Table(mirrors);
            }
            out.insert(host.clone(), format!("{MARKER}\n{doc}"));
        }
        out
    }

    fn write_tls(&self, table: &mut Table, host: &str) {
        if let Some(tls) = self.configs.get(host).and_then(|c| c.tls.as_ref()) {
            if tls.insecure_skip_verify {
                table["skip_verify"] = value(true);
            }
            if let Some(ca) = &tls.ca_file {
                table["ca"] = value(ca.display().to_string());
            }
        }
    }
}
