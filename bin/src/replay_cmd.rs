//! `skiff get --at`, `history`, `diff`, `log`, `replay`, `export` and `import`: the cluster's past,
//! read from a stopped server's data dir (`--data-dir`) or asked of a running server through its
//! `/debug/skiff/` endpoints (found as kubectl finds it: `--kubeconfig`, `$KUBECONFIG`, else the
//! default data dir's admin kubeconfig).
//!
//! Both ways run the same code in `skiff_api::replay::http::answer`: locally over the log, or on
//! the server; this file only prints.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};
use skiff_api::replay::http::{Diff, History, Log, Objects, Params};
use skiff_api::replay::objects::{resolve_kind, to_yaml, without_noise};
use skiff_api::replay::{Change, DiffKind, Point, Replay};
use skiff_kinds::table::{IncludeObject, TableVersion};
use skiff_meta::ResourceInfo;
use skiff_store::archive::{self, Progress};
use skiff_store::{EtcdStore, Revision, SledStore, Store};

use crate::datastore::DatastoreArgs;

/// Where history is read from.
#[derive(Debug, Clone, clap::Args)]
pub struct Source {
    /// Read a stopped server's data dir directly (the server must not be running on it).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,

    /// Or read the cluster's etcd prefix directly (`--datastore-endpoint` and the other
    /// datastore flags, as given to the server; it may be running).
    #[command(flatten)]
    pub datastore: DatastoreArgs,

    /// The kubeconfig of a running server [default: $KUBECONFIG, else the admin kubeconfig in
    /// the default data dir].
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,

    /// With `--data-dir`: the server's `--encryption-provider-config`, to read the resources it
    /// encrypts at rest.
    #[arg(long)]
    pub encryption_provider_config: Option<PathBuf>,
}

/// Output formats of `skiff get`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GetOutput {
    /// The objects as YAML.
    Yaml,
    /// The objects as JSON.
    Json,
    /// The table with the extra columns of `kubectl get -o wide`.
    Wide,
}

/// Flags of `skiff get`.
#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// The resource type: plural, singular, kind or short name (`deploy`, `cm`).
    pub kind: String,
    /// Only this object.
    pub name: Option<String>,
    /// The namespace [default: default].
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// The point in history: a revision, an RFC 3339 time or a time relative to now (`-15m`).
    #[arg(long, default_value = "now", allow_hyphen_values = true)]
    pub at: Point,
    /// Output format (default: the table kubectl prints).
    #[arg(short, long, value_enum)]
    pub output: Option<GetOutput>,
    /// Keep metadata.managedFields in YAML and JSON output (left out by default, as kubectl does).
    #[arg(long)]
    pub show_managed_fields: bool,
    #[command(flatten)]
    pub source: Source,
}

/// Output formats of `history`, `diff` and `log`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DataOutput {
    /// The full answer as JSON.
    Json,
    /// The table with more columns (`skiff history`: the groups of the user who made each
    /// version).
    Wide,
}

/// Flags of `skiff history`.
#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    /// The object, as KIND/NAME (`deploy/web`).
    pub object: String,
    /// Its namespace [default: default].
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Show a unified YAML diff between consecutive versions.
    #[arg(long)]
    pub diff: bool,
    /// Keep managedFields and resourceVersion in diffs.
    #[arg(long)]
    pub show_noise: bool,
    /// Output format (default: one line per version).
    #[arg(short, long, value_enum)]
    pub output: Option<DataOutput>,
    #[command(flatten)]
    pub source: Source,
}

/// Flags of `skiff diff`.
#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// Only this resource type.
    pub kind: Option<String>,
    /// The first point.
    #[arg(long, allow_hyphen_values = true)]
    pub from: Point,
    /// The second point.
    #[arg(long, default_value = "now", allow_hyphen_values = true)]
    pub to: Point,
    /// Only this namespace.
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Show each changed object's YAML diff.
    #[arg(short, long)]
    pub patch: bool,
    /// Keep managedFields and resourceVersion in diffs.
    #[arg(long)]
    pub show_noise: bool,
    /// Output format (default: one line per object).
    #[arg(short, long, value_enum)]
    pub output: Option<DataOutput>,
    #[command(flatten)]
    pub source: Source,
}

/// Flags of `skiff log`.
#[derive(Debug, clap::Args)]
pub struct LogArgs {
    /// Only this resource type.
    pub kind: Option<String>,
    /// From this point [default: the oldest retained revision].
    #[arg(long, allow_hyphen_values = true)]
    pub since: Option<Point>,
    /// Up to this point [default: now].
    #[arg(long, allow_hyphen_values = true)]
    pub until: Option<Point>,
    /// Keep printing new changes as they are committed.
    #[arg(short, long)]
    pub follow: bool,
    /// Only this namespace.
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Output format (default: one line per change); `json` prints one JSON change per line.
    #[arg(short, long, value_enum)]
    pub output: Option<DataOutput>,
    #[command(flatten)]
    pub source: Source,
}

/// Flags of `skiff replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The stopped server's data dir to read.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// The point to stop at (included).
    #[arg(long, allow_hyphen_values = true)]
    pub until: Point,
    /// The new data dir (must not exist or be empty); run `skiff server --data-dir DST --paused`
    /// on it to inspect the cluster as it was.
    #[arg(long)]
    pub into: PathBuf,
}

/// Flags of `skiff export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The stopped server's data dir to read.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Or the cluster's etcd prefix (`--datastore-endpoint` and the other datastore flags, as
    /// given to the server; it may be running). Its revisions have gaps; `skiff import` into a
    /// data dir numbers them densely (see the README, "Running on etcd").
    #[command(flatten)]
    pub datastore: DatastoreArgs,
    /// From this point [default: the oldest retained revision].
    #[arg(long, allow_hyphen_values = true)]
    pub since: Option<Point>,
    /// Up to this point [default: the newest revision].
    #[arg(long, allow_hyphen_values = true)]
    pub until: Option<Point>,
    /// The archive to write.
    #[arg(short, long)]
    pub output: PathBuf,
}

/// Flags of `skiff import`.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// The archive to read.
    pub file: PathBuf,
    /// The new data dir (must not exist or be empty).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Or an etcd prefix that holds nothing yet (`--datastore-endpoint` and the other datastore
    /// flags, as the server will be given them). etcd numbers the revisions anew; times and
    /// tags are kept.
    #[command(flatten)]
    pub datastore: DatastoreArgs,
}

/// Flags of `skiff repair`.
#[derive(Debug, clap::Args)]
pub struct RepairArgs {
    /// The stopped server's data dir.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Give up the writes past the damage: the log then ends where damage cut it. Copy the data
    /// dir first; restoring the newest `skiff export` archive keeps more when it is newer.
    #[arg(long)]
    pub accept_lost_writes: bool,
}

/// The store of a stopped server's data dir, opened for reading history: no retention runs, so
/// opening it never compacts anything.
pub fn open_data_dir(data_dir: &Path) -> Result<Arc<SledStore>> {
    let db = data_dir.join("db");
    if !db.is_dir() {
        bail!(
            "{} is not a skiff data dir (no db/ in it)",
            data_dir.display()
        );
    }
    let mut config = skiff_store::Config::new(db);
    config.retention.max_revisions = None;
    config.retention.max_age = None;
    config.prefix_retention.clear();
    let store = SledStore::open(config).map_err(|e| match e {
        skiff_store::Error::Locked { .. } => anyhow!(
            "data dir {} is in use by a running server: ask the server instead (--kubeconfig)",
            data_dir.display()
        ),
        other => anyhow::Error::new(other)
            .context(format!("cannot open the log in {}", data_dir.display())),
    })?;
    Ok(Arc::new(store))
}

/// The etcd config the datastore flags select, for reading or writing a cluster's prefix from
/// the command line (no retention runs here).
fn etcd_config(args: &DatastoreArgs) -> Result<Option<skiff_store::etcd::Config>> {
    args.etcd_config(skiff_store::Retention {
        max_revisions: None,
        max_age: None,
        interval: Duration::from_secs(10),
    })
}

/// Connects to the etcd prefix the datastore flags name, if they name one.
async fn open_etcd(args: &DatastoreArgs) -> Result<Option<Arc<EtcdStore>>> {
    match etcd_config(args)? {
        Some(config) => Ok(Some(Arc::new(
            crate::datastore::connect(config, args.datastore_wait).await?,
        ))),
        None => Ok(None),
    }
}

/// The log named by `--data-dir` or by the datastore flags (not both), if either is given.
async fn open_source(
    data_dir: Option<&Path>,
    datastore: &DatastoreArgs,
) -> Result<Option<Arc<dyn Store>>> {
    match (data_dir, datastore.datastore_endpoint.is_empty()) {
        (Some(_), false) => bail!(
            "give --data-dir or --datastore-endpoint, not both (is $SKIFF_DATASTORE_ENDPOINT set?)"
        ),
        (Some(dir), true) => Ok(Some(open_data_dir(dir)?)),
        (None, false) => Ok(open_etcd(datastore).await?.map(|s| -> Arc<dyn Store> { s })),
        (None, true) => Ok(None),
    }
}

/// A running server's debug endpoints.
struct Remote {
    client: reqwest::Client,
    server: String,
    token: Option<String>,
}

/// Where the answers come from.
enum Backend {
    /// A data dir's log or an etcd prefix, read here.
    Local(Replay, Arc<dyn Store>),
    /// A server, and the kinds it serves now (built-in and its definitions').
    Remote(Remote, Arc<skiff_kinds::Snapshot>),
}

fn default_kubeconfig() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("KUBECONFIG").filter(|p| !p.is_empty()) {
        // kubectl merges a list; the first file is where a skiff server's entry would be.
        return std::env::split_paths(&path).next();
    }
    crate::server::default_data_dir()
        .ok()
        .map(|d| d.join(crate::server::KUBECONFIG_FILE))
}

impl Remote {
    fn from_kubeconfig(path: &Path) -> Result<Remote> {
        use base64::Engine;
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the kubeconfig {}", path.display()))?;
        let doc: Value = serde_saphyr::from_str(&text)
            .with_context(|| format!("{} is not a kubeconfig", path.display()))?;
        let current = doc["current-context"].as_str().unwrap_or_default();
        let named = |list: &str, name: &str| -> Value {
            doc[list]
                .as_array()
                .and_then(|items| {
                    items
                        .iter()
                        .find(|i| name.is_empty() || i["name"] == name)
                        .cloned()
                })
                .unwrap_or(Value::Null)
        };
        let context = named("contexts", current);
        let cluster = named(
            "clusters",
            context["context"]["cluster"].as_str().unwrap_or(""),
        );
        let user = named("users", context["context"]["user"].as_str().unwrap_or(""));
        let server = cluster["cluster"]["server"]
            .as_str()
            .context("the kubeconfig names no server")?
            .trim_end_matches('/')
            .to_string();
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder();
        let ca = match (
            cluster["cluster"]["certificate-authority-data"].as_str(),
            cluster["cluster"]["certificate-authority"].as_str(),
        ) {
            (Some(data), _) => Some(
                base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .context("certificate-authority-data is not base64")?,
            ),
            (None, Some(file)) => {
                Some(std::fs::read(file).with_context(|| format!("reading {file}"))?)
            }
            (None, None) => None,
        };
        if let Some(ca) = ca {
            builder = builder.add_root_certificate(
                reqwest::Certificate::from_pem(&ca).context("the cluster CA is not PEM")?,
            );
        }
        let token = match (
            user["user"]["token"].as_str(),
            user["user"]["tokenFile"].as_str(),
        ) {
            (Some(t), _) => Some(t.to_string()),
            (None, Some(file)) => Some(std::fs::read_to_string(file)?.trim().to_string()),
            (None, None) => None,
        };
        Ok(Remote {
            client: builder.build().context("building the HTTPS client")?,
            server,
            token,
        })
    }

    /// The kinds the server serves: the built-in ones and its CustomResourceDefinitions', so
    /// that custom resources are named, scoped and printed here as the server serves them. A
    /// user who may not list definitions gets the built-in kinds.
    async fn kinds(&self) -> Result<Arc<skiff_kinds::Snapshot>> {
        let kinds = skiff_kinds::Kinds::builtin();
        let response = self
            .get(&format!(
                "{}/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                self.server
            ))
            .await?;
        if response.status().is_success() {
            let list: Value = response
                .json()
                .await
                .context("reading the server's definitions")?;
            for definition in list["items"].as_array().into_iter().flatten() {
                kinds.define(definition);
            }
        }
        Ok(kinds.snapshot())
    }

    /// GETs `url` with the kubeconfig's credentials.
    async fn get(&self, url: &str) -> Result<reqwest::Response> {
        let mut request = self.client.get(url);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        request
            .send()
            .await
            .with_context(|| format!("cannot reach the server at {}", self.server))
    }

    async fn ask(&self, action: &str, params: &Params) -> Result<Value> {
        let mut url = reqwest::Url::parse(&format!(
            "{}{}/{action}",
            self.server,
            skiff_api::replay::http::PREFIX
        ))
        .with_context(|| format!("the server URL {} is not a URL", self.server))?;
        url.query_pairs_mut().extend_pairs(params.iter());
        let response = self.get(url.as_str()).await?;
        let status = response.status();
        let body: Value = response
            .json()
            .await
            .context("reading the server's answer")?;
        if !status.is_success() {
            let message = body["message"].as_str().unwrap_or("no message");
            bail!("{message}");
        }
        Ok(body)
    }
}

impl Backend {
    async fn open(source: &Source) -> Result<Backend> {
        if let Some(store) = open_source(source.data_dir.as_deref(), &source.datastore).await? {
            let mut shared: Arc<dyn Store> = store.clone();
            if let Some(path) = &source.encryption_provider_config {
                let encryption =
                    skiff_api::encryption::Encryption::load(path).map_err(anyhow::Error::msg)?;
                shared = Arc::new(skiff_api::encryption::EncryptedStore::new(
                    shared,
                    Arc::new(encryption),
                ));
            }
            // The definitions in the log make their custom resources readable too.
            let replay = Replay::load(shared)
                .await
                .map_err(|e| anyhow!("reading the definitions in the log: {e}"))?;
            return Ok(Backend::Local(replay, store));
        }
        let path = source
            .kubeconfig
            .clone()
            .or_else(default_kubeconfig)
            .context(
                "no --data-dir, --datastore-endpoint, --kubeconfig or $KUBECONFIG to read history \
                 from",
            )?;
        let remote = Remote::from_kubeconfig(&path)?;
        let kinds = remote.kinds().await?;
        Ok(Backend::Remote(remote, kinds))
    }

    async fn ask<T: serde::de::DeserializeOwned>(
        &self,
        action: &str,
        params: &Params,
    ) -> Result<T> {
        let body = match self {
            Backend::Local(replay, _) => skiff_api::replay::http::answer(replay, action, params)
                .await
                .map_err(|e| anyhow!("{e}"))?,
            Backend::Remote(remote, _) => remote.ask(action, params).await?,
        };
        serde_json::from_value(body).context("an answer of an unexpected shape")
    }

    /// The kinds this backend knows: a data dir's built-in ones and those of every definition
    /// in its log; a server's built-in ones and those of the definitions it has now.
    fn kinds(&self) -> Arc<skiff_kinds::Snapshot> {
        match self {
            Backend::Local(replay, _) => replay.kinds(),
            Backend::Remote(_, kinds) => kinds.clone(),
        }
    }

    /// The resource a user means by `name`.
    fn kind(&self, name: &str) -> Result<&'static ResourceInfo> {
        resolve_kind(&self.kinds(), name)
            .ok_or_else(|| anyhow!("the server doesn't have a resource type \"{name}\""))
    }

    async fn close(self) -> Result<()> {
        if let Backend::Local(_, store) = self {
            store.close().await.context("closing the log")?;
        }
        Ok(())
    }
}

fn params(pairs: &[(&str, Option<String>)]) -> Params {
    pairs
        .iter()
        .filter_map(|(k, v)| v.clone().map(|v| (k.to_string(), v)))
        .collect::<HashMap<_, _>>()
}

/// A point as the endpoints take it.
fn point_param(point: &Point) -> String {
    match point {
        Point::Now => "now".into(),
        Point::Revision(r) => r.0.to_string(),
        Point::Time(t) => t.to_string(),
        // Relative points are resolved against this machine's clock, not the server's.
        Point::Ago(d) => jiff::Timestamp::try_from(std::time::SystemTime::now() - *d)
            .map(|t| t.to_string())
            .unwrap_or_default(),
    }
}

/// The namespace a namespaced request means (`-A`: none).
fn namespace(info: &ResourceInfo, namespace: &Option<String>, all: bool) -> Option<String> {
    if !info.namespaced || all {
        None
    } else {
        Some(namespace.clone().unwrap_or_else(|| "default".into()))
    }
}

/// `skiff get KIND [NAME] --at POINT`.
pub async fn get(args: GetArgs) -> Result<()> {
    let backend = Backend::open(&args.source).await?;
    let info = backend.kind(&args.kind)?;
    let ns = namespace(info, &args.namespace, args.all_namespaces);
    let answer: Result<Objects> = backend
        .ask(
            "get",
            &params(&[
                ("resource", Some(info.plural.to_string())),
                ("namespace", ns.clone()),
                ("name", args.name.clone()),
                ("at", Some(point_param(&args.at))),
            ]),
        )
        .await;
    let kinds = backend.kinds();
    backend.close().await?;
    let answer = answer?;
    let mut out = std::io::stdout().lock();
    if answer.items.is_empty() {
        if let Some(name) = &args.name {
            bail!(
                "{}{} \"{name}\" not found at revision {}",
                info.plural,
                if info.group.is_empty() {
                    String::new()
                } else {
                    format!(".{}", info.group)
                },
                answer.revision
            );
        }
        if matches!(args.output, None | Some(GetOutput::Wide)) {
            match &ns {
                Some(ns) => eprintln!("No resources found in {ns} namespace."),
                None => eprintln!("No resources found"),
            }
            return Ok(());
        }
    }
    match args.output {
        Some(GetOutput::Json) | Some(GetOutput::Yaml) => {
            let mut items = answer.items.clone();
            if !args.show_managed_fields {
                for item in &mut items {
                    if let Some(meta) = item.get_mut("metadata").and_then(Value::as_object_mut) {
                        meta.remove("managedFields");
                    }
                }
            }
            let value = match (&args.name, items.len()) {
                (Some(_), 1) => items[0].clone(),
                _ => json!({
                    "apiVersion": "v1", "kind": "List", "items": items,
                    "metadata": {"resourceVersion": ""},
                }),
            };
            if args.output == Some(GetOutput::Json) {
                writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
            } else {
                write!(out, "{}", to_yaml(&value))?;
            }
        }
        None | Some(GetOutput::Wide) => {
            let now = answer
                .time
                .as_deref()
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(jiff::Timestamp::now);
            let kind = kinds
                .of(info)
                .cloned()
                .ok_or_else(|| anyhow::anyhow!("no table for {}", info.plural))?;
            let table = skiff_kinds::table::to_table_at(
                &*kind,
                answer.items.clone(),
                json!({}),
                IncludeObject::None,
                TableVersion::V1,
                now,
            );
            let namespaces: Option<Vec<String>> = (info.namespaced && ns.is_none()).then(|| {
                answer
                    .items
                    .iter()
                    .map(|o| {
                        o["metadata"]["namespace"]
                            .as_str()
                            .unwrap_or("")
                            .to_string()
                    })
                    .collect()
            });
            write!(
                out,
                "{}",
                print_table(
                    &table,
                    namespaces.as_deref(),
                    args.output == Some(GetOutput::Wide)
                )
            )?;
        }
    }
    Ok(())
}

/// A Table as kubectl prints it: upper-case headers, columns padded by three spaces (Go's
/// tabwriter with minimum width 6), `<none>` for empty cells that are not strings.
pub fn print_table(table: &Value, namespaces: Option<&[String]>, wide: bool) -> String {
    let columns: Vec<(usize, String)> = table["columnDefinitions"]
        .as_array()
        .map(|cols| {
            cols.iter()
                .enumerate()
                .filter(|(_, c)| wide || c["priority"].as_i64().unwrap_or(0) == 0)
                .map(|(i, c)| (i, c["name"].as_str().unwrap_or("").to_uppercase()))
                .collect()
        })
        .unwrap_or_default();
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut header: Vec<String> = columns.iter().map(|(_, n)| n.clone()).collect();
    if namespaces.is_some() {
        header.insert(0, "NAMESPACE".into());
    }
    rows.push(header);
    for (r, row) in table["rows"].as_array().into_iter().flatten().enumerate() {
        let cells = row["cells"].as_array().cloned().unwrap_or_default();
        let mut line: Vec<String> = columns
            .iter()
            .map(|(i, _)| match cells.get(*i) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => "<none>".into(),
                Some(other) => other.to_string(),
            })
            .collect();
        if let Some(ns) = namespaces {
            line.insert(0, ns.get(r).cloned().unwrap_or_default());
        }
        rows.push(line);
    }
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let last = row.len().saturating_sub(1);
        for (c, cell) in row.iter().enumerate() {
            out.push_str(cell);
            if c < last {
                let width = (widths[c] + 3).max(6);
                out.push_str(&" ".repeat(width - cell.chars().count()));
            }
        }
        out.push('\n');
    }
    out
}

/// The unified diff of two objects' YAML, coloured when `colour`.
pub fn yaml_diff(
    before: Option<&Value>,
    after: Option<&Value>,
    labels: (&str, &str),
    noise: bool,
    colour: bool,
) -> String {
    let text = |v: Option<&Value>| match v {
        Some(v) if noise => to_yaml(v),
        Some(v) => to_yaml(&without_noise(v)),
        None => String::new(),
    };
    let (a, b) = (text(before), text(after));
    let diff = similar::TextDiff::from_lines(&a, &b);
    let unified = diff
        .unified_diff()
        .context_radius(3)
        .header(labels.0, labels.1)
        .to_string();
    if !colour {
        return unified;
    }
    unified
        .lines()
        .map(|line| {
            let code = if line.starts_with("+++") || line.starts_with("---") {
                "1"
            } else if line.starts_with('+') {
                "32"
            } else if line.starts_with('-') {
                "31"
            } else if line.starts_with("@@") {
                "36"
            } else {
                return format!("{line}\n");
            };
            format!("\x1b[{code}m{line}\x1b[0m\n")
        })
        .collect()
}

fn colour() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// `skiff history KIND/NAME`.
pub async fn history(args: HistoryArgs) -> Result<()> {
    let (kind_name, name) = args
        .object
        .split_once('/')
        .context("name the object as KIND/NAME (for example deploy/web)")?;
    let backend = Backend::open(&args.source).await?;
    let info = backend.kind(kind_name)?;
    let ns = namespace(info, &args.namespace, false);
    let answer: Result<History> = backend
        .ask(
            "history",
            &params(&[
                ("resource", Some(info.plural.to_string())),
                ("namespace", ns.clone()),
                ("name", Some(name.to_string())),
            ]),
        )
        .await;
    backend.close().await?;
    let answer = answer?;
    let mut out = std::io::stdout().lock();
    if args.output == Some(DataOutput::Json) {
        writeln!(out, "{}", serde_json::to_string_pretty(&answer)?)?;
        return Ok(());
    }
    if answer.versions.is_empty() {
        bail!("no history for {}/{name}", info.plural);
    }
    let colour = colour();
    let wide = args.output == Some(DataOutput::Wide);
    let mut rows = vec![vec![
        "REVISION".to_string(),
        "TIME".into(),
        "OPERATION".into(),
        "MANAGER".into(),
        "USER".into(),
    ]];
    if wide {
        rows[0].push("GROUPS".into());
    }
    for v in &answer.versions {
        let mut row = vec![
            v.revision.to_string(),
            v.time.clone(),
            v.operation.to_string(),
            v.manager.clone().unwrap_or_else(|| "<unknown>".into()),
            user_cell(v.user.as_ref()),
        ];
        if wide {
            row.push(
                v.user
                    .as_ref()
                    .map_or(String::new(), |u| u.groups.join(",")),
            );
        }
        rows.push(row);
    }
    if !args.diff {
        write!(out, "{}", columns(&rows))?;
        return Ok(());
    }
    let mut before: Option<&Value> = None;
    for v in &answer.versions {
        let after = (v.operation != skiff_api::replay::Operation::Deleted).then_some(&v.object);
        writeln!(
            out,
            "revision {} at {}: {}{}, user {}",
            v.revision,
            v.time,
            v.operation,
            v.manager
                .as_deref()
                .map(|m| format!(" by {m}"))
                .unwrap_or_default(),
            user_cell(v.user.as_ref())
        )?;
        let from = before
            .and_then(|b| b["metadata"]["resourceVersion"].as_str())
            .map_or("(none)".to_string(), |r| format!("revision {r}"));
        let to = format!("revision {}", v.revision);
        write!(
            out,
            "{}",
            yaml_diff(before, after, (&from, &to), args.show_noise, colour)
        )?;
        before = after;
    }
    Ok(())
}

/// Who made a change, for a table: the user (and who impersonated it), or `<system>` for the
/// server's own writes and those from before users were recorded.
fn user_cell(user: Option<&skiff_api::origin::Origin>) -> String {
    user.map_or_else(|| "<system>".into(), skiff_api::origin::Origin::display)
}

/// Rows padded into columns as kubectl's tabwriter does.
fn columns(rows: &[Vec<String>]) -> String {
    let table = json!({
        "columnDefinitions": rows[0].iter().map(|n| json!({"name": n, "priority": 0})).collect::<Vec<_>>(),
        "rows": rows[1..].iter().map(|r| json!({"cells": r})).collect::<Vec<_>>(),
    });
    print_table(&table, None, false)
}

fn object_name(namespace: &Option<String>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

/// `skiff diff --from --to`.
pub async fn diff(args: DiffArgs) -> Result<()> {
    let backend = Backend::open(&args.source).await?;
    let info = args.kind.as_deref().map(|k| backend.kind(k)).transpose()?;
    let answer: Result<Diff> = backend
        .ask(
            "diff",
            &params(&[
                ("resource", info.map(|i| i.plural.to_string())),
                ("namespace", args.namespace.clone()),
                ("from", Some(point_param(&args.from))),
                ("to", Some(point_param(&args.to))),
            ]),
        )
        .await;
    backend.close().await?;
    let answer = answer?;
    let mut out = std::io::stdout().lock();
    if args.output == Some(DataOutput::Json) {
        writeln!(out, "{}", serde_json::to_string_pretty(&answer)?)?;
        return Ok(());
    }
    let colour = colour();
    for p in &answer.pruned {
        eprintln!(
            "{}s are left out: their history is kept only from revision {} (they change too often to keep every version)",
            p.kind, p.compacted
        );
    }
    for d in &answer.objects {
        let what = match d.diff {
            DiffKind::Created => "created",
            DiffKind::Changed => "changed",
            DiffKind::Deleted => "deleted",
        };
        writeln!(
            out,
            "{what:<8} {} {}",
            d.kind,
            object_name(&d.namespace, &d.name)
        )?;
        if args.patch {
            let labels = (
                format!("revision {}", answer.from),
                format!("revision {}", answer.to),
            );
            write!(
                out,
                "{}",
                yaml_diff(
                    d.before.as_ref(),
                    d.after.as_ref(),
                    (&labels.0, &labels.1),
                    args.show_noise,
                    colour
                )
            )?;
        }
    }
    Ok(())
}

fn change_line(c: &Change) -> String {
    format!(
        "{:>8}  {}  {:<14}  {} {}  {}{}{}",
        c.revision,
        c.time,
        c.operation.to_string(),
        c.kind,
        object_name(&c.namespace, &c.name),
        c.fields.join(","),
        c.manager
            .as_deref()
            .map(|m| format!("  by {m}"))
            .unwrap_or_default(),
        c.user
            .as_ref()
            .map(|u| format!("  user {}", u.display()))
            .unwrap_or_default()
    )
}

/// How long one `skiff log --follow` request may wait for the next change.
const FOLLOW_WAIT: Duration = Duration::from_secs(30);

/// `skiff log`.
pub async fn log(args: LogArgs) -> Result<()> {
    let backend = Backend::open(&args.source).await?;
    let info = args.kind.as_deref().map(|k| backend.kind(k)).transpose()?;
    let result = log_with(&backend, &args, info).await;
    backend.close().await?;
    result
}

async fn log_with(backend: &Backend, args: &LogArgs, info: Option<&ResourceInfo>) -> Result<()> {
    let mut since = args.since.as_ref().map(point_param);
    let until = args.until.as_ref().map(point_param);
    // Following, each request is a long poll: the server holds an empty answer until the next
    // change in scope commits, so live changes print as they happen.
    let wait = (args.follow && until.is_none()).then(|| FOLLOW_WAIT.as_secs().to_string());
    loop {
        let asked = std::time::Instant::now();
        let answer: Log = backend
            .ask(
                "log",
                &params(&[
                    ("resource", info.map(|i| i.plural.to_string())),
                    ("namespace", args.namespace.clone()),
                    ("since", since.clone()),
                    ("until", until.clone()),
                    ("wait", wait.clone()),
                ]),
            )
            .await?;
        {
            let mut out = std::io::stdout().lock();
            for c in &answer.changes {
                if args.output == Some(DataOutput::Json) {
                    writeln!(out, "{}", serde_json::to_string(c)?)?;
                } else {
                    writeln!(out, "{}", change_line(c))?;
                }
            }
            out.flush()?;
        }
        if answer.pruned > 0 {
            eprintln!(
                "{} changes to node Leases and Events left out: they keep only their newest versions",
                answer.pruned
            );
        }
        // Continue right after the last revision read: no gap and no repeat between pages,
        // nor between history and live changes.
        since = Some((answer.revision + 1).to_string());
        if answer.more {
            continue;
        }
        if wait.is_none() {
            return Ok(());
        }
        if answer.changes.is_empty() && asked.elapsed() < Duration::from_secs(1) {
            // An empty answer that did not wait (a server without long polls): do not spin.
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

fn progress_bar(what: &'static str) -> (indicatif::ProgressBar, impl FnMut(Progress)) {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{bar:30}] {pos}/{len} entries ({per_sec}, ETA {eta})",
        )
        .expect("template")
        .progress_chars("=> "),
    );
    bar.set_message(what);
    let handle = bar.clone();
    (bar, move |p: Progress| {
        handle.set_length(p.total);
        handle.set_position(p.done);
    })
}

async fn resolve_local(store: &Arc<dyn Store>, point: &Point) -> Result<Revision> {
    Replay::new(store.clone())
        .resolve(point)
        .await
        .map_err(|e| anyhow!("{e}"))
}

fn store_error(e: skiff_store::Error) -> anyhow::Error {
    match e {
        skiff_store::Error::Compacted {
            requested,
            compacted,
            ..
        } => anyhow!(
            "revision {requested} is before the retained history: compacted at revision {compacted}"
        ),
        other => anyhow::Error::new(other),
    }
}

/// Copies the PKI and token file so that a replayed or imported data dir serves with the same
/// CA and admin token.
fn copy_identity(src: &Path, dst: &Path) -> Result<()> {
    let tokens = src.join("tokens.csv");
    if tokens.is_file() {
        std::fs::copy(&tokens, dst.join("tokens.csv"))?;
    }
    let pki = src.join("pki");
    if pki.is_dir() {
        std::fs::create_dir_all(dst.join("pki"))?;
        for entry in std::fs::read_dir(&pki)? {
            let entry = entry?;
            if entry.file_type()?.is_file() {
                std::fs::copy(entry.path(), dst.join("pki").join(entry.file_name()))?;
            }
        }
    }
    Ok(())
}

fn fresh_dir(dir: &Path) -> Result<()> {
    if dir.exists() && std::fs::read_dir(dir)?.next().is_some() {
        bail!("{} is not empty: give a new directory", dir.display());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))
}

/// `skiff replay --data-dir SRC --until POINT --into DST`.
pub async fn replay(args: ReplayArgs) -> Result<()> {
    let store: Arc<dyn Store> = open_data_dir(&args.data_dir)?;
    let result = async {
        let until = resolve_local(&store, &args.until).await?;
        fresh_dir(&args.into)?;
        let (bar, mut progress) = progress_bar("replay");
        let summary = archive::copy(store.as_ref(), None, Some(until), &args.into.join("db"), &mut progress)
            .await
            .map_err(store_error)?;
        bar.finish_and_clear();
        copy_identity(&args.data_dir, &args.into)?;
        println!(
            "replayed revisions {}..={} ({} entries) into {}; inspect with: skiff server --data-dir {} --paused",
            summary.first, summary.last, summary.entries, args.into.display(), args.into.display()
        );
        Ok(())
    }
    .await;
    store.close().await.context("closing the log")?;
    result
}

/// `skiff export`: from a stopped server's data dir, or from an etcd prefix.
pub async fn export(args: ExportArgs) -> Result<()> {
    let (store, etcd): (Arc<dyn Store>, Option<Arc<EtcdStore>>) =
        match (&args.data_dir, open_etcd(&args.datastore).await?) {
            (Some(_), Some(_)) => bail!(
                "give --data-dir or --datastore-endpoint, not both (is $SKIFF_DATASTORE_ENDPOINT \
                 set?)"
            ),
            (Some(dir), None) => (open_data_dir(dir)?, None),
            (None, Some(etcd)) => (etcd.clone(), Some(etcd)),
            (None, None) => bail!("name the log to export: --data-dir or --datastore-endpoint"),
        };
    let result = async {
        let since = match &args.since {
            Some(p) => Some(resolve_local(&store, p).await?),
            None => None,
        };
        let until = match &args.until {
            Some(p) => Some(resolve_local(&store, p).await?),
            None => None,
        };
        let tmp = args.output.with_extension("partial");
        let file = std::fs::File::create(&tmp)
            .with_context(|| format!("cannot create {}", tmp.display()))?;
        let mut writer = std::io::BufWriter::with_capacity(1 << 20, file);
        let (bar, mut progress) = progress_bar("export");
        let summary = match &etcd {
            Some(etcd) => {
                archive::export_etcd(etcd, since, until, &mut writer, &mut progress).await
            }
            None => archive::export(store.as_ref(), since, until, &mut writer, &mut progress).await,
        }
        .map_err(store_error);
        bar.finish_and_clear();
        let summary = match summary {
            Ok(s) => s,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
        };
        let file = writer.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        std::fs::rename(&tmp, &args.output)?;
        if summary.gaps {
            println!(
                "exported etcd revisions {}..={} ({} of them changed the prefix: {} entries, {} \
                 base versions) to {}; a data dir imported from it numbers them {}..={}",
                summary.first,
                summary.last,
                summary.entries,
                summary.entries,
                summary.base,
                args.output.display(),
                summary.first,
                summary.first.0 + summary.entries - 1,
            );
        } else {
            println!(
                "exported revisions {}..={} ({} entries, {} base versions) to {}",
                summary.first,
                summary.last,
                summary.entries,
                summary.base,
                args.output.display()
            );
        }
        Ok(())
    }
    .await;
    store.close().await.context("closing the log")?;
    result
}

/// `skiff import FILE --data-dir DST`, or into an empty etcd prefix.
pub async fn import(args: ImportArgs) -> Result<()> {
    let etcd = match (&args.data_dir, etcd_config(&args.datastore)?) {
        (Some(_), Some(_)) => bail!(
            "give --data-dir or --datastore-endpoint, not both (is $SKIFF_DATASTORE_ENDPOINT set?)"
        ),
        (None, None) => bail!("name where to import: --data-dir or --datastore-endpoint"),
        (Some(dir), None) => return import_data_dir(&args.file, dir),
        (None, Some(config)) => config,
    };
    if !args.file.is_file() {
        bail!("cannot open {}: not a file", args.file.display());
    }
    let prefix = String::from_utf8_lossy(&etcd.prefix).into_owned();
    let endpoints = etcd.endpoints.join(",");
    let store = crate::datastore::connect(etcd, args.datastore.datastore_wait).await?;
    let (bar, mut progress) = progress_bar("import");
    let result = archive::import_etcd(&args.file, &store, &mut progress).await;
    bar.finish_and_clear();
    store.close().await.context("closing the etcd client")?;
    let (summary, mapping) = result.map_err(|e| {
        anyhow::Error::new(e).context(format!(
            "cannot import {} into etcd prefix {prefix:?} at {endpoints}",
            args.file.display()
        ))
    })?;
    println!(
        "imported {}revisions {}..={} ({} entries, {} base versions in {} etcd txns) into etcd \
         prefix {prefix:?} at {endpoints}",
        if summary.gaps { "etcd " } else { "" },
        summary.first,
        summary.last,
        summary.entries,
        mapping.base,
        mapping.base_txns,
    );
    println!(
        "revisions renumbered by etcd: {} -> {}, {} -> {} ({} txns for {} entries); commit times \
         and tags kept, so --at TIME reads as on the source",
        mapping.source_first,
        mapping.etcd_first,
        mapping.source_last,
        mapping.etcd_last,
        mapping.entry_txns,
        mapping.entries,
    );
    if mapping.leases > 0 {
        println!(
            "{} leases created anew with their TTLs, counted from now",
            mapping.leases
        );
    }
    if mapping.pruned > 0 {
        println!(
            "{} versions that per-prefix retention had pruned in the source were skipped: etcd's \
             history lacks them (reads before their prefix's watermark differ from the source's)",
            mapping.pruned
        );
    }
    Ok(())
}

fn import_data_dir(file: &Path, data_dir: &Path) -> Result<()> {
    fresh_dir(data_dir)?;
    let opened =
        std::fs::File::open(file).with_context(|| format!("cannot open {}", file.display()))?;
    let mut reader = std::io::BufReader::with_capacity(1 << 20, opened);
    let (bar, mut progress) = progress_bar("import");
    let db = data_dir.join("db");
    let summary = tokio::task::block_in_place(|| archive::import(&mut reader, &db, &mut progress))
        .map_err(|e| anyhow::Error::new(e).context(format!("cannot import {}", file.display())))?;
    bar.finish_and_clear();
    if summary.gaps {
        println!(
            "imported etcd revisions {}..={} ({} entries, numbered densely {}..={}) into {}; \
             --at TIME reads as on etcd, --at REVISION takes the new numbers",
            summary.first,
            summary.last,
            summary.entries,
            summary.first,
            summary.first.0 + summary.entries - 1,
            data_dir.display()
        );
    } else {
        println!(
            "imported revisions {}..={} ({} entries) into {}",
            summary.first,
            summary.last,
            summary.entries,
            data_dir.display()
        );
    }
    Ok(())
}

/// `skiff repair`: opens the data dir as the server would; a log that ends below its durable mark
/// (damage cut sled's recovery short) opens only with `--accept-lost-writes`, which resets the mark
/// to where the log now ends.
pub async fn repair(args: RepairArgs) -> Result<()> {
    let db = args.data_dir.join("db");
    if !db.is_dir() {
        bail!(
            "{} is not a skiff data dir (no db/ in it)",
            args.data_dir.display()
        );
    }
    let mut config = skiff_store::Config::new(db);
    config.accept_lost_writes = args.accept_lost_writes;
    let store = match SledStore::open(config) {
        Ok(store) => store,
        Err(skiff_store::Error::Locked { .. }) => bail!(
            "data dir {} is in use by a running server: stop it first",
            args.data_dir.display()
        ),
        Err(e @ skiff_store::Error::Corrupt { .. }) if !args.accept_lost_writes => {
            bail!(
                "{e}\nTo give up the writes past the damage, copy the data dir, then run \
                 `skiff repair --data-dir {} --accept-lost-writes`",
                args.data_dir.display()
            )
        }
        Err(e) => return Err(anyhow::Error::new(e).context("cannot open the log")),
    };
    let revision = store.status().revision.0;
    store.close().await?;
    println!(
        "{}: the log opens and ends at revision {revision}",
        args.data_dir.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_print_like_kubectl() {
        let table = json!({
            "columnDefinitions": [
                {"name": "Name", "priority": 0}, {"name": "Ready", "priority": 0},
                {"name": "Images", "priority": 1}, {"name": "Age", "priority": 0}],
            "rows": [{"cells": ["web", "1/1", "nginx", "5m"]}, {"cells": ["a", "0/3", "x", "10s"]}],
        });
        assert_eq!(
            print_table(&table, None, false),
            "NAME   READY   AGE\nweb    1/1     5m\na      0/3     10s\n"
        );
        let ns = vec!["default".to_string(), "kube-system".to_string()];
        assert_eq!(
            print_table(&table, Some(&ns), true),
            "NAMESPACE     NAME   READY   IMAGES   AGE\n\
             default       web    1/1     nginx    5m\n\
             kube-system   a      0/3     x        10s\n"
        );
    }

    #[test]
    fn yaml_diffs_leave_out_noise_unless_asked() {
        let a = json!({"metadata": {"name": "c", "resourceVersion": "1", "managedFields": [{"manager": "x"}]}, "data": {"k": "1"}});
        let b = json!({"metadata": {"name": "c", "resourceVersion": "2", "managedFields": [{"manager": "y"}]}, "data": {"k": "2"}});
        let quiet = yaml_diff(Some(&a), Some(&b), ("r1", "r2"), false, false);
        assert!(
            quiet.contains("-  k: '1'") || quiet.contains("-  k: \"1\""),
            "{quiet}"
        );
        assert!(
            !quiet.contains("resourceVersion") && !quiet.contains("manager"),
            "{quiet}"
        );
        let noisy = yaml_diff(Some(&a), Some(&b), ("r1", "r2"), true, false);
        assert!(
            noisy.contains("resourceVersion") && noisy.contains("manager"),
            "{noisy}"
        );
        let coloured = yaml_diff(Some(&a), Some(&b), ("r1", "r2"), false, true);
        assert!(
            coloured.contains("\x1b[31m-") && coloured.contains("\x1b[32m+"),
            "{coloured}"
        );
        assert_eq!(
            yaml_diff(Some(&a), Some(&a), ("r1", "r2"), false, false),
            ""
        );
    }
}
