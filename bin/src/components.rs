//! The components `skiff server` runs beside the API server, and the subcommands that run them as
//! processes of their own: each gets a client for the API server (in-process components talk to
//! it over loopback HTTPS like any other client, exactly as Kubernetes components do) and stops
//! when the shutdown token is cancelled.

use std::collections::BTreeSet;

use anyhow::{Context, Result};
use skiff_client::Client;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// A component besides the API server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum)]
pub enum Component {
    /// The controllers (endpoints, ReplicaSet, Deployment, namespace, garbage collector, ...).
    Controllers,
}

impl Component {
    /// Every component, in start order.
    pub const ALL: &[Component] = &[Component::Controllers];
}

/// Every component's flags, shown under their own headings in `--help`.
#[derive(clap::Args, Clone, Debug)]
pub struct Options {
    /// Controller manager flags.
    #[command(flatten, next_help_heading = "Controllers")]
    pub controllers: skiff_controllers::Options,
}

/// Which components run, from `--components` or `--disable`.
pub fn select(components: Option<&[Component]>, disable: &[Component]) -> BTreeSet<Component> {
    let chosen: BTreeSet<Component> = match components {
        Some(list) => list.iter().copied().collect(),
        None => Component::ALL.iter().copied().collect(),
    };
    chosen.into_iter().filter(|c| !disable.contains(c)).collect()
}

/// Starts `component` on `tasks`.
pub fn spawn(
    tasks: &mut JoinSet<(Component, Result<()>)>,
    component: Component,
    client: Client,
    options: &Options,
    shutdown: CancellationToken,
) {
    let options = options.clone();
    tasks.spawn(async move {
        let result = match component {
            Component::Controllers => skiff_controllers::run(client, options.controllers, shutdown)
                .await
                .context("the controllers failed"),
        };
        (component, result)
    });
}
