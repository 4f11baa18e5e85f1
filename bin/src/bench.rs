//! `skiff bench`: benchmarks run from the binary. `skiff bench api` compares skiff's Kubernetes API
//! with etcd 3.4's JSON gateway (the harness is `skiff_api::bench`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

/// Which benchmark.
#[derive(Debug, Subcommand)]
pub enum Bench {
    /// skiff's Kubernetes API (HTTPS, ConfigMaps) against etcd 3.4's v3 JSON gateway, side by side:
    /// creates/s, gets/s, lists of 10k objects and watch fan-out at each concurrency level.
    Api(ApiArgs),
}

/// Flags of `skiff bench api`.
#[derive(Debug, Args)]
pub struct ApiArgs {
    /// The etcd 3.4 binary (Debian package `etcd-server`).
    #[arg(long, default_value = "etcd")]
    etcd: PathBuf,
    /// Directory for the temporary data dirs (default: the system temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Concurrent clients, one run per level.
    #[arg(long, value_delimiter = ',', default_value = "1,16,256")]
    clients: Vec<usize>,
    /// Seconds each create and get run lasts.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Objects in the listed collection.
    #[arg(long, default_value_t = 10_000)]
    list_objects: usize,
    /// Watchers in the fan-out runs.
    #[arg(long, default_value_t = 1000)]
    watchers: usize,
    /// Events written in each fan-out run.
    #[arg(long, default_value_t = 200)]
    watch_events: usize,
}

/// Runs the chosen benchmark and prints its table.
pub async fn run(bench: Bench) -> Result<()> {
    match bench {
        Bench::Api(args) => {
            let options = skiff_api::bench::Options {
                etcd: args.etcd,
                dir: args.dir,
                clients: args.clients,
                duration: Duration::from_secs(args.seconds),
                list_objects: args.list_objects,
                watchers: args.watchers,
                watch_events: args.watch_events,
                ..Default::default()
            };
            let rows = skiff_api::bench::run(&options, |row| {
                eprintln!(
                    "{} x{}: skiff {:.0}/s, etcd {:.0}/s",
                    row.workload,
                    row.clients,
                    row.skiff.rate(),
                    row.etcd.rate()
                );
            })
            .await
            .context("the API benchmark failed")?;
            print!("{}", skiff_api::bench::table(&rows));
            Ok(())
        }
    }
}
