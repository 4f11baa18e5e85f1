//! `skiff bench rbac`: what authorization costs a request. Against one `skiff apiserver` (this
//! binary, a child on a temporary data dir) holding a policy of a realistic size (by default
//! 200 ClusterRoles and 1,000 RoleBindings over 10 namespaces, on top of the bootstrap policy),
//! ConfigMap creates/s and gets/s are measured for two users side by side, in alternated rounds
//! at the same concurrency:
//! - the admin (`system:masters`), whom the authorizer lets through before RBAC looks at a rule;
//! - a user with a client certificate whose only grant is one RoleBinding among the namespace's
//!   hundred, so that every request of theirs is decided by walking the policy.
//!
//! Both authenticate by the same means (a client certificate, checked once per connection), so
//! the difference is the authorizer's.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use serde_json::{Value, json};
use skiff_client::Api;
use skiff_client::api::PostParams;

use crate::bench::SpawnedServer;

/// Flags of `skiff bench rbac`.
#[derive(Debug, clap::Args)]
pub struct RbacArgs {
    /// ClusterRoles created before measuring.
    #[arg(long, default_value_t = 200)]
    cluster_roles: usize,
    /// RoleBindings created before measuring, spread evenly over `--namespaces`.
    #[arg(long, default_value_t = 1000)]
    role_bindings: usize,
    /// Namespaces the RoleBindings are spread over.
    #[arg(long, default_value_t = 10)]
    namespaces: usize,
    /// Concurrent clients, one set of rounds per level.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    clients: Vec<usize>,
    /// ConfigMaps created per round and user (then read back by name as many times).
    #[arg(long, default_value_t = 2000)]
    objects: usize,
    /// Alternated rounds (admin, then the RBAC user, each round).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Directory for the temporary data dir (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// The user whose requests RBAC decides.
const USER: &str = "bench-user";

fn namespace(i: usize) -> String {
    format!("bench-{i}")
}

/// ClusterRole `i`: a handful of rules over assorted resources, as chart roles have; only the
/// last one grants ConfigMaps.
fn cluster_role(i: usize, grants_config_maps: bool) -> Value {
    let mut rules = vec![
        json!({"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list", "watch"]}),
        json!({"apiGroups": ["apps"], "resources": ["deployments", "statefulsets"],
               "verbs": ["get", "list", "watch", "update", "patch"]}),
        json!({"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "delete"],
               "resourceNames": [format!("job-{i}")]}),
        json!({"apiGroups": ["example.com"], "resources": [format!("widgets{i}")], "verbs": ["*"]}),
    ];
    if grants_config_maps {
        rules.push(json!({"apiGroups": [""], "resources": ["configmaps"],
                          "verbs": ["create", "get", "list", "delete"]}));
    }
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
           "metadata": {"name": format!("bench-role-{i}")}, "rules": rules})
}

/// RoleBinding `i` in `namespace` of ClusterRole `role` to `user` (and a group, as charts bind).
fn role_binding(i: usize, namespace: &str, role: usize, user: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
           "metadata": {"name": format!("bench-binding-{i}"), "namespace": namespace},
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                       "name": format!("bench-role-{role}")},
           "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user},
                        {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io",
                         "name": format!("team-{}", i % 37)}]})
}

/// Runs `work(i)` for `i` in `0..count` over `clients` concurrent tasks; returns operations/s.
async fn rate<F, Fut>(count: usize, clients: usize, work: F) -> Result<f64>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let work = Arc::new(work);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let next = next.clone();
        let work = work.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return Ok::<(), anyhow::Error>(());
                }
                work(i).await?;
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(count as f64 / started.elapsed().as_secs_f64())
}

/// Creates the policy: ClusterRoles, namespaces, RoleBindings; the bench user's binding is the
/// last one created in the last namespace, where it works.
async fn create_policy(client: &skiff_client::Client, args: &RbacArgs) -> Result<String> {
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let params = PostParams::default();
    for i in 0..args.cluster_roles {
        let role = cluster_role(i, i + 1 == args.cluster_roles);
        roles
            .create(&params, &serde_json::from_value(role)?)
            .await?;
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for n in 0..args.namespaces {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": namespace(n)}});
        namespaces
            .create(&params, &serde_json::from_value(ns)?)
            .await?;
    }
    let per_namespace = args.role_bindings.div_ceil(args.namespaces.max(1));
    let work_namespace = namespace(args.namespaces.saturating_sub(1));
    for i in 0..args.role_bindings {
        let ns = namespace((i / per_namespace).min(args.namespaces - 1));
        let last = i + 1 == args.role_bindings;
        let (role, user) = if last {
            (args.cluster_roles - 1, USER.to_string())
        } else {
            // Other users, bound to the roles that do not grant ConfigMaps.
            (
                i % (args.cluster_roles - 1).max(1),
                format!("user-{}", i % 113),
            )
        };
        let binding: RoleBinding = serde_json::from_value(role_binding(i, &ns, role, &user))?;
        Api::<RoleBinding>::namespaced(client.clone(), &ns)
            .create(&params, &binding)
            .await?;
    }
    Ok(work_namespace)
}

/// A client of the bench user: a client certificate issued from the server's CA.
fn user_client(server: &SpawnedServer) -> Result<skiff_client::Client> {
    let pki = server.data_dir().join("pki");
    let read = |name: &str| {
        std::fs::read_to_string(pki.join(name))
            .with_context(|| format!("reading {}", pki.join(name).display()))
    };
    let ca_pem = read(skiff_api::tls::CA_CERT_FILE)?;
    let authority = skiff_pki::Authority::from_pem(&ca_pem, &read(skiff_api::tls::CA_KEY_FILE)?)?;
    let credentials = authority.issue_client(
        &skiff_pki::Subject::new(USER, &["bench-team"]),
        Duration::from_secs(3600),
    )?;
    Ok(skiff_client::connect_with_certificate(
        &server.url()?,
        ca_pem.as_bytes(),
        &credentials,
    )?)
}

/// Creates/s and gets/s of ConfigMaps in `namespace` as `client`, names prefixed `prefix`.
async fn measure(
    client: &skiff_client::Client,
    namespace: &str,
    prefix: String,
    objects: usize,
    clients: usize,
) -> Result<(f64, f64)> {
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let (create_maps, create_prefix) = (maps.clone(), prefix.clone());
    let creates = rate(objects, clients, move |i| {
        let maps = create_maps.clone();
        let name = format!("{create_prefix}-{i}");
        async move {
            let map: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": name}, "data": {"key": "value"}}))?;
            maps.create(&PostParams::default(), &map).await?;
            Ok(())
        }
    })
    .await?;
    let gets = rate(objects, clients, move |i| {
        let maps = maps.clone();
        let name = format!("{prefix}-{i}");
        async move {
            maps.get(&name).await?;
            Ok(())
        }
    })
    .await?;
    Ok((creates, gets))
}

/// Runs `skiff bench rbac`.
pub async fn run(args: RbacArgs) -> Result<()> {
    anyhow::ensure!(
        args.cluster_roles >= 2 && args.namespaces >= 1 && args.role_bindings >= args.namespaces,
        "need at least 2 ClusterRoles, 1 namespace and a RoleBinding per namespace"
    );
    let mut server = SpawnedServer::start("apiserver", args.dir.as_deref())?;
    let admin = server.wait_ready().await?;
    let started = Instant::now();
    let work_namespace = create_policy(&admin, &args).await?;
    println!(
        "policy: {} ClusterRoles, {} RoleBindings over {} namespaces (created in {:.1} s); \
         the user's one grant is the last binding of {work_namespace}",
        args.cluster_roles,
        args.role_bindings,
        args.namespaces,
        started.elapsed().as_secs_f64()
    );
    let user = user_client(&server)?;
    // The user may do what the binding grants, and nothing it does not.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(user.clone(), &work_namespace);
    anyhow::ensure!(
        secrets.list(&Default::default()).await.is_err(),
        "the bench user must not read Secrets"
    );
    println!(
        "ConfigMaps, {} per round and user, created then read back by name:",
        args.objects
    );
    println!(
        "  clients  round  admin create/s  RBAC create/s  ratio  admin get/s  RBAC get/s  ratio"
    );
    for &clients in &args.clients {
        for round in 0..args.rounds {
            let (admin_create, admin_get) = measure(
                &admin,
                &work_namespace,
                format!("admin-{clients}-{round}"),
                args.objects,
                clients,
            )
            .await?;
            let (user_create, user_get) = measure(
                &user,
                &work_namespace,
                format!("user-{clients}-{round}"),
                args.objects,
                clients,
            )
            .await?;
            println!(
                "  {clients:>7}  {round:>5}  {admin_create:>14.0}  {user_create:>13.0}  {:>5.2}  {admin_get:>11.0}  {user_get:>10.0}  {:>5.2}",
                user_create / admin_create,
                user_get / admin_get
            );
        }
    }
    drop(server.child.kill());
    Ok(())
}
