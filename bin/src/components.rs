//! The components `skiff server` runs beside the API server, and the subcommands that run them as
//! processes of their own: each gets a client for the API server (in-process components talk to
//! it over loopback HTTPS like any other client, exactly as Kubernetes components do) and stops
//! when the shutdown token is cancelled.

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::{Context, Result};
use skiff_client::{Client, leaderelection};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// A component besides the API server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum)]
pub enum Component {
    /// The controllers (endpoints, ReplicaSet, Deployment, namespace, garbage collector, ...).
    Controllers,
    /// The scheduler.
    Scheduler,
    /// The kubelet: this machine as a node that runs pods.
    Kubelet,
    /// The service proxy.
    Proxy,
    /// The built-in local-path provisioner (`skiff.io/local-path`) and its default
    /// `local-path` StorageClass; it runs inside the controller manager.
    LocalStorage,
    /// The cluster DNS server and its `kube-dns` Service in `kube-system` (`--disable dns` to
    /// bring your own; then give the kubelet `--cluster-dns`).
    Dns,
    /// The built-in ingress controller (in the proxy) and its default IngressClass `skiff`
    /// (`--disable ingress` to install another).
    Ingress,
}

impl Component {
    /// Every component, in start order.
    pub const ALL: &[Component] = &[
        Component::Controllers,
        Component::Scheduler,
        Component::Kubelet,
        Component::Proxy,
        Component::LocalStorage,
        Component::Dns,
        Component::Ingress,
    ];

    /// Whether the component is a task of its own (the local-path provisioner is one of the
    /// controllers, the ingress controller part of the proxy).
    pub fn is_task(self) -> bool {
        !matches!(self, Component::LocalStorage | Component::Ingress)
    }
}

/// Every component's flags, shown under their own headings in `--help`.
#[derive(clap::Args, Clone, Debug)]
pub struct Options {
    /// Controller manager flags.
    #[command(flatten, next_help_heading = "Controllers")]
    pub controllers: skiff_controllers::Options,
    /// Scheduler flags.
    #[command(flatten, next_help_heading = "Scheduler")]
    pub scheduler: skiff_scheduler::Options,
    /// Kubelet flags.
    #[command(flatten, next_help_heading = "Kubelet")]
    pub kubelet: skiff_kubelet::Options,
    /// Proxy flags.
    #[command(flatten, next_help_heading = "Proxy")]
    pub proxy: skiff_proxy::Options,
    /// Cluster DNS flags (its domain is the kubelet's `--cluster-domain`).
    #[command(flatten, next_help_heading = "Cluster DNS")]
    pub dns: skiff_dns::Options,
    /// Leader election of the scheduler and the controllers (one set of flags for both; each
    /// has its own Lease, `kube-scheduler` and `kube-controller-manager`).
    #[command(flatten, next_help_heading = "Leader election")]
    pub leader_election: skiff_client::leaderelection::Flags,
}

/// What in-process components get from the server that hosts them.
#[derive(Clone, Debug)]
pub struct Host {
    /// The PKI directory: the controllers sign certificate requests with its CA.
    pub pki_dir: PathBuf,
    /// The data dir (the kubelet keeps its state under `<data-dir>/kubelet` unless told).
    pub data_dir: PathBuf,
    /// The secret the API server presents to kubelets (for logs).
    pub kubelet_token: String,
    /// Whether the local-path provisioner runs (`--disable local-storage` says no).
    pub local_storage: bool,
    /// Whether the cluster DNS runs (`--disable dns` says no): then the kubelet's pods get the
    /// `kube-dns` ClusterIP as their nameserver unless `--cluster-dns` says otherwise.
    pub dns: bool,
    /// Whether the proxy runs the ingress controller (`--disable ingress` says no).
    pub ingress: bool,
    /// Whether the scheduler and the controllers elect a leader when `--leader-elect` is not
    /// given (on an external etcd).
    pub leader_elect_default: bool,
}

/// Which components run, from `--components` or `--disable`.
pub fn select(components: Option<&[Component]>, disable: &[Component]) -> BTreeSet<Component> {
    let chosen: BTreeSet<Component> = match components {
        Some(list) => list.iter().copied().collect(),
        None => Component::ALL.iter().copied().collect(),
    };
    chosen
        .into_iter()
        .filter(|c| !disable.contains(c))
        .collect()
}

/// Starts `component` on `tasks`.
pub fn spawn(
    tasks: &mut JoinSet<(Component, Result<()>)>,
    component: Component,
    client: Client,
    options: &Options,
    host: &Host,
    shutdown: CancellationToken,
) {
    let options = options.clone();
    let host = host.clone();
    tasks.spawn(async move {
        let result = match component {
            Component::Controllers => {
                let mut controllers = options.controllers;
                if controllers.cluster_signing_cert_file.is_none()
                    && controllers.cluster_signing_key_file.is_none()
                {
                    controllers.cluster_signing_cert_file =
                        Some(host.pki_dir.join(skiff_api::tls::CA_CERT_FILE));
                    controllers.cluster_signing_key_file =
                        Some(host.pki_dir.join(skiff_api::tls::CA_KEY_FILE));
                }
                // The API server's own key, so that the tokens it is given verify.
                controllers
                    .service_account_private_key_file
                    .get_or_insert_with(|| {
                        host.pki_dir.join(skiff_api::serviceaccount::keys::KEY_FILE)
                    });
                controllers
                    .default_local_storage_path
                    .get_or_insert_with(|| host.data_dir.join("storage"));
                if !host.local_storage {
                    controllers.controllers.push(format!(
                        "-{}",
                        skiff_controllers::manager::LOCAL_PATH_PROVISIONER
                    ));
                }
                match options.leader_election.config(
                    leaderelection::CONTROLLER_MANAGER_LEASE,
                    host.leader_elect_default,
                ) {
                    Ok(election) => {
                        let work = client.clone();
                        leaderelection::run(client, election, shutdown, move |stop| {
                            skiff_controllers::run(work.clone(), controllers.clone(), stop)
                        })
                        .await
                        .context("the controllers failed")
                    }
                    Err(e) => Err(e.into()),
                }
            }
            Component::LocalStorage | Component::Ingress => {
                unreachable!("the local-path provisioner runs in the controllers, the ingress controller in the proxy")
            }
            Component::Scheduler => match options
                .leader_election
                .config(leaderelection::SCHEDULER_LEASE, host.leader_elect_default)
            {
                Ok(election) => {
                    let (work, scheduler) = (client.clone(), options.scheduler);
                    leaderelection::run(client, election, shutdown, move |stop| {
                        skiff_scheduler::run(work.clone(), scheduler.clone(), stop)
                    })
                    .await
                    .context("the scheduler failed")
                }
                Err(e) => Err(e.into()),
            },
            Component::Kubelet => {
                let mut kubelet = options.kubelet;
                kubelet
                    .root_dir
                    .get_or_insert_with(|| host.data_dir.join("kubelet"));
                kubelet.token.get_or_insert(host.kubelet_token);
                kubelet
                    .images_dir
                    .get_or_insert_with(|| host.data_dir.join("images"));
                kubelet
                    .registry_config
                    .get_or_insert_with(|| host.data_dir.join("registries.yaml"));
                if host.dns && kubelet.cluster_dns.is_empty() {
                    kubelet.cluster_dns.push(options.dns.dns_service_ip);
                }
                skiff_kubelet::run(client, kubelet, shutdown)
                    .await
                    .context("the kubelet failed")
            }
            Component::Proxy => {
                let mut proxy = options.proxy;
                proxy.no_ingress |= !host.ingress;
                if proxy.ingress_status_address.is_none()
                    && proxy.ingress_http_address.ip().is_unspecified()
                {
                    proxy.ingress_status_address = Some(options.kubelet.node_ip);
                }
                skiff_proxy::run(client, proxy, shutdown)
                    .await
                    .context("the proxy failed")
            }
            Component::Dns => {
                let domain = options.kubelet.cluster_domain.clone();
                skiff_dns::run(client, options.dns, domain, shutdown)
                    .await
                    .context("the cluster DNS failed")
            }
        };
        (component, result)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection() {
        assert_eq!(select(None, &[]).len(), Component::ALL.len());
        assert_eq!(
            select(None, &[Component::Kubelet, Component::Proxy]),
            BTreeSet::from([
                Component::Controllers,
                Component::Scheduler,
                Component::LocalStorage,
                Component::Dns,
                Component::Ingress
            ])
        );
        assert_eq!(
            select(Some(&[Component::Scheduler]), &[]),
            BTreeSet::from([Component::Scheduler])
        );
        assert!(select(Some(&[Component::Scheduler]), &[Component::Scheduler]).is_empty());
    }
}
