//! `skiff bench admission`: what one validating admission webhook and one
//! ValidatingAdmissionPolicy add to a create. Against one `skiff apiserver` (this binary, a child
//! on a temporary data dir), ConfigMaps are created in three namespaces side by side, in
//! alternated rounds at the same concurrency:
//! - `bench-none`: no webhook or policy matches it;
//! - `bench-webhook`: one ValidatingWebhookConfiguration (namespace selector) matches, and its
//!   webhook, an HTTPS server in this process with its own CA, allows every request;
//! - `bench-policy`: one ValidatingAdmissionPolicy, bound by namespace selector, checks a CEL
//!   expression over the object (`object.data` has fewer than 100 keys).
//!
//! The webhook configuration and the policy exist through every round, so `bench-none`'s creates
//! pay what a cluster with them installed pays for a request they do not match. Figures per
//! round: creates/s, p50 and p99 latency, and the API server's CPU per create (from its
//! `/proc` entry; the webhook server's own CPU is in this process and not counted).

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use base64::Engine;
use http_body_util::{BodyExt, Full};
use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::{Value, json};
use skiff_client::Api;
use skiff_client::api::{DynamicObject, PostParams};
use tokio::net::TcpListener;

use crate::bench::{SpawnedServer, micros};
use crate::bench_deployment::{cpu_seconds, load_average, percentile};

/// Flags of `skiff bench admission`.
#[derive(Debug, clap::Args)]
pub struct AdmissionArgs {
    /// Concurrent clients, one set of rounds per level.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    clients: Vec<usize>,
    /// ConfigMaps created per round and namespace.
    #[arg(long, default_value_t = 2000)]
    objects: usize,
    /// Alternated rounds (none, webhook, policy, each round).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Directory for the temporary data dir (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// The three setups, by namespace.
const SETUPS: [(&str, &str); 3] = [
    ("none", "bench-none"),
    ("webhook", "bench-webhook"),
    ("policy", "bench-policy"),
];

/// The webhook: an HTTPS server on a loopback port that allows every review and counts them.
struct Webhook {
    port: u16,
    ca_pem: String,
    reviews: Arc<AtomicUsize>,
}

async fn start_webhook() -> Result<Webhook> {
    let authority =
        skiff_pki::Authority::generate("skiff bench webhook CA", Duration::from_secs(3600))?;
    let credentials =
        authority.issue_server(&["127.0.0.1".to_string()], Duration::from_secs(3600))?;
    let certs = rustls_pemfile::certs(&mut credentials.cert_pem.as_bytes())
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let key = rustls_pemfile::private_key(&mut credentials.key_pem.as_bytes())?
        .context("the webhook key")?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(certs, key)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let reviews = Arc::new(AtomicUsize::new(0));
    let counter = reviews.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let counter = counter.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |request| {
                    let counter = counter.clone();
                    async move { Ok::<_, Infallible>(allow(request, &counter).await) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                .await;
            });
        }
    });
    Ok(Webhook {
        port,
        ca_pem: authority.cert_pem().to_string(),
        reviews,
    })
}

/// The answer to one review: allowed, with the request's uid.
async fn allow(
    request: hyper::Request<hyper::body::Incoming>,
    counter: &AtomicUsize,
) -> hyper::Response<Full<bytes::Bytes>> {
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => bytes::Bytes::new(),
    };
    let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    counter.fetch_add(1, Ordering::Relaxed);
    let answer = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                        "response": {"uid": review["request"]["uid"], "allowed": true}});
    hyper::Response::builder()
        .header("content-type", "application/json")
        .body(Full::new(bytes::Bytes::from(answer.to_string())))
        .expect("a response")
}

/// Creates `object` (any kind) through the dynamic API.
async fn create(client: &skiff_client::Client, object: Value) -> Result<()> {
    let object: DynamicObject = serde_json::from_value(object)?;
    let types = object.types.clone().context("apiVersion and kind")?;
    let (group, version) = types
        .api_version
        .split_once('/')
        .unwrap_or(("", &types.api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, &types.kind);
    let (resource, _) = kube::discovery::pinned_kind(client, &gvk).await?;
    let api: Api<DynamicObject> = match object.metadata.namespace.as_deref() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    api.create(&PostParams::default(), &object)
        .await
        .with_context(|| format!("creating {} {:?}", types.kind, object.metadata.name))?;
    Ok(())
}

/// The namespaces, the webhook configuration and the policy with its binding.
async fn install(client: &skiff_client::Client, webhook: &Webhook) -> Result<()> {
    for (setup, namespace) in SETUPS {
        create(
            client,
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": namespace, "labels": {"bench": setup}}}),
        )
        .await?;
    }
    let ca_bundle = base64::engine::general_purpose::STANDARD.encode(&webhook.ca_pem);
    create(
        client,
        json!({"apiVersion": "admissionregistration.k8s.io/v1",
               "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "bench"},
               "webhooks": [{"name": "allow.bench.skiff.io",
                   "clientConfig": {"url": format!("https://127.0.0.1:{}/validate", webhook.port),
                                    "caBundle": ca_bundle},
                   "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                              "resources": ["configmaps"]}],
                   "namespaceSelector": {"matchLabels": {"bench": "webhook"}},
                   "sideEffects": "None", "admissionReviewVersions": ["v1"],
                   "failurePolicy": "Fail", "timeoutSeconds": 10}]}),
    )
    .await?;
    create(
        client,
        json!({"apiVersion": "admissionregistration.k8s.io/v1",
               "kind": "ValidatingAdmissionPolicy", "metadata": {"name": "bench"},
               "spec": {"failurePolicy": "Fail",
                   "matchConstraints": {"resourceRules": [{"operations": ["CREATE"],
                       "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]},
                   "validations": [{"expression": "!has(object.data) || object.data.size() < 100",
                                    "message": "at most 99 keys"}]}}),
    )
    .await?;
    create(
        client,
        json!({"apiVersion": "admissionregistration.k8s.io/v1",
               "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": "bench"},
               "spec": {"policyName": "bench", "validationActions": ["Deny"],
                        "matchResources": {"namespaceSelector":
                                           {"matchLabels": {"bench": "policy"}}}}}),
    )
    .await
}

/// Waits until the webhook is called and the policy denies, so that no round measures an
/// admission chain that has not yet seen its configuration.
async fn wait_until_effective(client: &skiff_client::Client, webhook: &Webhook) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let params = PostParams::default();
    let mut probe = 0;
    loop {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the webhook or the policy never took effect"
        );
        probe += 1;
        let before = webhook.reviews.load(Ordering::Relaxed);
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "bench-webhook");
        let map: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": format!("probe-{probe}")}}))?;
        maps.create(&params, &map).await?;
        let called = webhook.reviews.load(Ordering::Relaxed) > before;
        let data: serde_json::Map<String, Value> =
            (0..100).map(|i| (format!("k{i}"), json!("v"))).collect();
        let big: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": format!("probe-{probe}")}, "data": data}),
        )?;
        let denied = Api::<ConfigMap>::namespaced(client.clone(), "bench-policy")
            .create(&params, &big)
            .await
            .is_err();
        if called && denied {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One round of one setup.
struct Round {
    rate: f64,
    p50: Duration,
    p99: Duration,
    cpu_per_create: Duration,
}

/// Creates `objects` ConfigMaps in `namespace` over `clients` tasks.
async fn round(
    client: &skiff_client::Client,
    server_pid: u32,
    namespace: &str,
    prefix: String,
    objects: usize,
    clients: usize,
) -> Result<Round> {
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let next = Arc::new(AtomicUsize::new(0));
    let cpu_before = cpu_seconds(server_pid);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (maps, next, prefix) = (maps.clone(), next.clone(), prefix.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= objects {
                    return Ok::<_, anyhow::Error>(latencies);
                }
                let map: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": format!("{prefix}-{i}")}, "data": {"key": "value"}}))?;
                let sent = Instant::now();
                maps.create(&PostParams::default(), &map).await?;
                latencies.push(sent.elapsed());
            }
        }));
    }
    let mut latencies = Vec::with_capacity(objects);
    for task in tasks {
        latencies.extend(task.await??);
    }
    let elapsed = started.elapsed();
    let cpu = cpu_seconds(server_pid) - cpu_before;
    latencies.sort();
    Ok(Round {
        rate: objects as f64 / elapsed.as_secs_f64(),
        p50: percentile(&latencies, 50.0),
        p99: percentile(&latencies, 99.0),
        cpu_per_create: Duration::from_secs_f64(cpu.max(0.0) / objects as f64),
    })
}

/// Runs `skiff bench admission`.
pub async fn run(args: AdmissionArgs) -> Result<()> {
    let webhook = start_webhook().await?;
    let mut server = SpawnedServer::start("apiserver", args.dir.as_deref())?;
    let client = server.wait_ready().await?;
    let pid = server.child.id();
    install(&client, &webhook).await?;
    wait_until_effective(&client, &webhook).await?;
    println!(
        "ConfigMap creates, {} per round and setup; load average before: {}",
        args.objects,
        load_average()
    );
    println!(
        "  clients  round  setup     creates/s       p50       p99  server CPU/create  ratio (creates/s, CPU) to none"
    );
    for &clients in &args.clients {
        for r in 0..args.rounds {
            let mut none: Option<Round> = None;
            for (setup, namespace) in SETUPS {
                let reviews = webhook.reviews.load(Ordering::Relaxed);
                let figures = round(
                    &client,
                    pid,
                    namespace,
                    format!("{setup}-{clients}-{r}"),
                    args.objects,
                    clients,
                )
                .await?;
                let called = webhook.reviews.load(Ordering::Relaxed) - reviews;
                // The webhook is asked about its namespace's creates, and only those.
                let expected = if setup == "webhook" { args.objects } else { 0 };
                anyhow::ensure!(
                    called == expected,
                    "the webhook saw {called} reviews in the {setup} round, not {expected}"
                );
                let ratio = none.as_ref().map_or_else(String::new, |n| {
                    format!(
                        "{:.2}x, {:.2}x",
                        figures.rate / n.rate,
                        figures.cpu_per_create.as_secs_f64() / n.cpu_per_create.as_secs_f64()
                    )
                });
                println!(
                    "  {clients:>7}  {r:>5}  {setup:<8}  {:>9.0}  {:>8}  {:>8}  {:>17}  {ratio}",
                    figures.rate,
                    micros(figures.p50),
                    micros(figures.p99),
                    micros(figures.cpu_per_create),
                );
                if setup == "none" {
                    none = Some(figures);
                }
            }
        }
    }
    println!("load average after: {}", load_average());
    drop(server.child.kill());
    Ok(())
}
