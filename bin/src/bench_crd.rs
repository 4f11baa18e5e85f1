//! `skiff bench crd`: what custom resources cost. Against one `skiff apiserver` (this binary, a
//! child on a temporary data dir):
//! - the time from a definition's create to `Established`, and to its first custom resource
//!   created, for a large published schema (prometheus-operator's `Prometheus`, about 800 KB) and
//!   a small one;
//! - creates/s of custom resources of that large schema against ConfigMaps of the same JSON size,
//!   side by side, in alternated rounds at the same concurrency.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};
use skiff_client::Api;
use skiff_client::api::{ApiResource, DynamicObject, PostParams};

use crate::bench::SpawnedServer;

/// Flags of `skiff bench crd`.
#[derive(Debug, clap::Args)]
pub struct CrdArgs {
    /// The large definition (a YAML file of one CustomResourceDefinition).
    #[arg(
        long,
        default_value = "kinds/testdata/crds/monitoring.coreos.com_prometheuses.yaml"
    )]
    definition: PathBuf,
    /// Objects created per round and kind.
    #[arg(long, default_value_t = 2000)]
    objects: usize,
    /// Concurrent clients.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Alternated rounds (custom resources, then ConfigMaps, each round).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Directory for the temporary data dir (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// A small definition of one's own, to set beside the published one.
fn small_definition() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.bench.skiff.io"},
        "spec": {"group": "bench.skiff.io", "scope": "Namespaced",
                 "names": {"plural": "widgets", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                   "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                       "spec": {"type": "object", "properties": {"size": {"type": "string"}}}}}}}]}
    })
}

/// A Prometheus custom resource of about `size` bytes of JSON (its spec's external labels fill
/// it up), valid against the published schema.
fn prometheus(name: &str, size: usize) -> Value {
    let mut object = json!({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"serviceAccountName": "prometheus", "replicas": 1,
                 "serviceMonitorSelector": {"matchLabels": {"team": "frontend"}},
                 "resources": {"requests": {"memory": "400Mi"}},
                 "externalLabels": {}}
    });
    let mut i = 0;
    while serde_json::to_vec(&object).map_or(0, |v| v.len()) < size {
        object["spec"]["externalLabels"][format!("label{i}")] = json!("x".repeat(24));
        i += 1;
    }
    object
}

/// A ConfigMap of the same JSON size.
fn config_map(name: &str, size: usize) -> ConfigMap {
    let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": name, "namespace": "default"}, "data": {}});
    let mut i = 0;
    while serde_json::to_vec(&object).map_or(0, |v| v.len()) < size {
        object["data"][format!("label{i}")] = json!("x".repeat(24));
        i += 1;
    }
    serde_json::from_value(object).expect("a ConfigMap")
}

/// Creates `definition`, then measures the time to `Established` and to the first custom
/// resource `first` created through it.
async fn establish(
    client: &skiff_client::Client,
    definition: Value,
    resource: &ApiResource,
    first: Value,
) -> Result<(Duration, Duration)> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let typed: CustomResourceDefinition = serde_json::from_value(definition)?;
    let name = typed.metadata.name.clone().unwrap_or_default();
    let started = Instant::now();
    crds.create(&PostParams::default(), &typed)
        .await
        .with_context(|| format!("creating {name}"))?;
    let established = loop {
        let crd = crds.get(&name).await?;
        let ready = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if ready {
            break started.elapsed();
        }
        if started.elapsed() > Duration::from_secs(30) {
            bail!("{name} not Established within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let objects: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", resource);
    let object: DynamicObject = serde_json::from_value(first)?;
    let served = loop {
        match objects.create(&PostParams::default(), &object).await {
            Ok(_) => break started.elapsed(),
            Err(e) if started.elapsed() > Duration::from_secs(30) => {
                bail!("no {} served within 30 s: {e}", resource.kind)
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(1)).await,
        }
    };
    Ok((established, served))
}

/// Creates `count` objects with `clients` concurrent tasks; returns creates/s.
async fn create_rate<F, Fut>(count: usize, clients: usize, create: F) -> Result<f64>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let create = Arc::new(create);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let next = next.clone();
        let create = create.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return Ok::<(), anyhow::Error>(());
                }
                create(i).await?;
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(count as f64 / started.elapsed().as_secs_f64())
}

/// Runs `skiff bench crd`.
pub async fn run(args: CrdArgs) -> Result<()> {
    let text = std::fs::read_to_string(&args.definition)
        .with_context(|| format!("reading {}", args.definition.display()))?;
    let large: Value = serde_saphyr::from_str(&text)
        .with_context(|| format!("parsing {}", args.definition.display()))?;
    let mut server = SpawnedServer::start("apiserver", args.dir.as_deref())?;
    let client = server.wait_ready().await?;

    println!("definition create to Established and to its first custom resource:");
    let small_resource = ApiResource {
        group: "bench.skiff.io".into(),
        version: "v1".into(),
        api_version: "bench.skiff.io/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let (established, served) = establish(
        &client,
        small_definition(),
        &small_resource,
        json!({"apiVersion": "bench.skiff.io/v1", "kind": "Widget",
               "metadata": {"name": "first", "namespace": "default"}, "spec": {"size": "s"}}),
    )
    .await?;
    println!(
        "  small schema ({} bytes): Established {:.1} ms, served {:.1} ms",
        serde_json::to_vec(&small_definition())?.len(),
        established.as_secs_f64() * 1e3,
        served.as_secs_f64() * 1e3
    );
    let prometheus_resource = ApiResource {
        group: "monitoring.coreos.com".into(),
        version: "v1".into(),
        api_version: "monitoring.coreos.com/v1".into(),
        kind: "Prometheus".into(),
        plural: "prometheuses".into(),
    };
    let large_bytes = serde_json::to_vec(&large)?.len();
    let (established, served) = establish(
        &client,
        large,
        &prometheus_resource,
        prometheus("first", 1024),
    )
    .await?;
    println!(
        "  {} ({large_bytes} bytes of JSON): Established {:.1} ms, served {:.1} ms",
        args.definition.display(),
        established.as_secs_f64() * 1e3,
        served.as_secs_f64() * 1e3
    );

    println!(
        "creates/s, {} objects of ~1 KiB per round, {} clients:",
        args.objects, args.clients
    );
    println!("  round  Prometheus CR  ConfigMap  ratio");
    for round in 0..args.rounds {
        let objects: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), "default", &prometheus_resource);
        let cr_rate = create_rate(args.objects, args.clients, move |i| {
            let objects = objects.clone();
            async move {
                let object: DynamicObject =
                    serde_json::from_value(prometheus(&format!("p{round}-{i}"), 1024))?;
                objects.create(&PostParams::default(), &object).await?;
                Ok(())
            }
        })
        .await?;
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let cm_rate = create_rate(args.objects, args.clients, move |i| {
            let maps = maps.clone();
            async move {
                maps.create(
                    &PostParams::default(),
                    &config_map(&format!("c{round}-{i}"), 1024),
                )
                .await?;
                Ok(())
            }
        })
        .await?;
        println!(
            "  {round:>5}  {cr_rate:>13.0}  {cm_rate:>9.0}  {:.2}",
            cr_rate / cm_rate
        );
    }
    drop(server.child.kill());
    Ok(())
}
