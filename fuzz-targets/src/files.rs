//! Files an operator writes: the `--config` file of `skiff` (a YAML map from flag names to
//! values), applied to a command line shaped like `skiff server`'s.

use clap::{Arg, ArgAction, Command};

use crate::config_file;

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
