//! `skiff`: the single binary that runs the control plane, or any piece of it.
//!
//! # Layout
//! - `main.rs`: the command line, logging and the runtime.
//! - [`server`]: `skiff server` / `skiff apiserver`: the data dir, the log, the PKI and tokens, the
//!   API server on its listener, and graceful shutdown.

mod config_file;
mod server;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

/// A Kubernetes control plane in one binary.
#[derive(Debug, Parser)]
#[command(name = "skiff", version, about, long_about = None)]
struct Cli {
    /// Log output format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true, env = "SKIFF_LOG_FORMAT")]
    log_format: LogFormat,

    /// A YAML file of flag values (`flag-name: value`); the command line and `SKIFF_*`
    /// environment variables override it.
    #[arg(long, global = true, env = "SKIFF_CONFIG")]
    config: Option<std::path::PathBuf>,

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

/// Parses the command line, with the config file's values as defaults.
fn parse() -> anyhow::Result<Cli> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let mut command = Cli::command();
    if let Some(path) = config_file::find(&args) {
        command = config_file::apply(command, &path, &args)?;
    }
    let matches = command.get_matches_from(args);
    Ok(Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit()))
}

fn main() -> std::process::ExitCode {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(e) => {
            eprintln!("skiff: {e:#}");
            return std::process::ExitCode::from(2);
        }
    };
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
