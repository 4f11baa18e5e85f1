//! Files an operator writes: the `--config` file of `skiff` (a YAML map from flag names to
//! values), applied to a command line shaped like `skiff server`'s; and the node's
//! registries.yaml, turned into containerd's `hosts.toml` files; and a kubeconfig, as every
//! component (`--kubeconfig`) reads it through kube-rs.

use clap::{Arg, ArgAction, Command};

use crate::config_file;

/// The kubelet's registries.yaml parser and `hosts.toml` writer, compiled here by path (the
/// kubelet crate is too heavy for a fuzz build; this file depends on nothing else of it).
#[path = "../../kubelet/src/registries/config.rs"]
mod registries;

fn cli() -> Command {
    Command::new("skiff").subcommand(
        Command::new("server")
            .arg(Arg::new("port").long("port").default_value("6443"))
            .arg(Arg::new("data_dir").long("data-dir"))
            .arg(
                Arg::new("tls_san")
                    .long("tls-san")
                    .action(ArgAction::Append),
            )
            .arg(Arg::new("paused").long("paused").action(ArgAction::SetTrue)),
    )
}

/// A config file: it applies or is refused with an error; when it applies, the command line
/// still parses (clap validates the values) or is refused, without a panic.
pub fn config_file(data: &[u8]) {
    let Some(text) = crate::utf8(data) else {
        return; // refused by `read_to_string` before the parser
    };
    let args: Vec<std::ffi::OsString> = ["skiff", "server"].iter().map(Into::into).collect();
    let path = std::path::Path::new("config.yaml");
    if let Ok(command) = config_file::apply_text(cli(), text, path, &args) {
        let _ = command.try_get_matches_from(&args);
    }
}

/// A registries.yaml: it parses or is refused with an error. What it parses into becomes
/// `hosts.toml` files, each of which must go to a directory of its own under containerd's
/// hosts dir, be TOML that parses back, and say what was asked: the registry's server, and its
/// mirrors as `[host."<url>"]` tables in their order (a repeated mirror once).
pub fn registries_yaml(data: &[u8]) {
    let Some(text) = crate::utf8(data) else {
        return; // refused by `read_to_string` before the parser
    };
    let Ok(parsed) = registries::Registries::parse(text) else {
        return;
    };
    for (dir, file) in parsed.hosts_files() {
        assert!(
            !dir.is_empty() && dir != "." && dir != ".." && !dir.contains(['/', '\\']),
            "{dir:?} is not one directory"
        );
        assert!(file.starts_with(registries::MARKER), "{file}");
        let doc: toml_edit::DocumentMut = file
            .parse()
            .unwrap_or_else(|e| panic!("the hosts.toml of {dir:?} is not TOML: {e}\n{file}"));
        assert_eq!(
            doc["server"].as_str(),
            Some(registries::server_url(&dir).as_str()),
            "{file}"
        );
        let mut mirrors: Vec<String> = Vec::new();
        for endpoint in parsed.mirrors.get(&dir).map_or(&[][..], |m| &m.endpoint) {
            let url = registries::endpoint_url(endpoint);
            if !mirrors.contains(&url) {
                mirrors.push(url);
            }
        }
        let tables: Vec<String> = doc
            .get("host")
            .and_then(|h| h.as_table())
            .map(|t| t.iter().map(|(url, _)| url.to_string()).collect())
            .unwrap_or_default();
        assert_eq!(tables, mirrors, "{file}");
    }
}

/// A kubeconfig, as the components read theirs (`skiff_client::config`: kube-rs's `Kubeconfig`,
/// then `Config::from_custom_kubeconfig`): it parses or is refused, and one that parses becomes
/// a client configuration or is refused, without a panic. The second step reads the files a
/// kubeconfig names (a CA, a client key), so it runs only on kubeconfigs that name none: a fuzz
/// run must not read `/dev/zero`.
pub fn kubeconfig(data: &[u8]) {
    use kube_client::config::{Config, KubeConfigOptions, Kubeconfig};
    let Some(text) = crate::utf8(data) else {
        return; // refused by `read_to_string` before the parser
    };
    let Ok(parsed) = Kubeconfig::from_yaml(text) else {
        return;
    };
    let names_a_file = parsed
        .clusters
        .iter()
        .filter_map(|c| c.cluster.as_ref())
        .any(|c| c.certificate_authority.is_some())
        || parsed
            .auth_infos
            .iter()
            .filter_map(|a| a.auth_info.as_ref())
            .any(|a| {
                a.client_certificate.is_some() || a.client_key.is_some() || a.token_file.is_some()
            });
    if names_a_file {
        return;
    }
    // Nothing in it waits on I/O: one poll with a waker that does nothing finishes it.
    let options = KubeConfigOptions::default();
    let mut build = std::pin::pin!(Config::from_custom_kubeconfig(parsed, &options));
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    if let std::task::Poll::Ready(Ok(config)) = build.as_mut().poll(&mut context) {
        assert!(config.cluster_url.host().is_some() || config.cluster_url.scheme().is_none());
    }
}
