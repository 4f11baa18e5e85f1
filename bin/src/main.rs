//! `skiff`: the single binary that runs the control plane, or any piece of it.
//!
//! # Layout
//! - `main.rs`: the command line, logging and the runtime.
//! - [`server`]: `skiff server` / `skiff apiserver`: the data dir, the log, the PKI and tokens, the
//!   API server on its listener, and graceful shutdown.
//! - [`bench`]: `skiff bench api`.

mod bench;
mod server;

use clap::{Parser, Subcommand, ValueEnum};

/// A Kubernetes control plane in one binary.
#[derive(Debug, Parser)]
#[command(name = "skiff", version, about, long_about = None)]
struct Cli {
    /// Log output format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true, env = "SKIFF_LOG_FORMAT")]
    log_format: LogFormat,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the whole control plane in one process on an embedded data dir.
    Server(server::ServerArgs),
    /// Run only the API server (over the embedded log).
    Apiserver(server::ServerArgs),
    /// Run a benchmark.
    #[command(subcommand)]
    Bench(bench::Bench),
}

fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("skiff")
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("skiff: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Server(args) => server::run(args, server::Mode::AllInOne).await,
            Command::Apiserver(args) => server::run(args, server::Mode::ApiServerOnly).await,
            Command::Bench(bench) => bench::run(bench).await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("skiff: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
