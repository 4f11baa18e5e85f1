//! The optional config file: `--config FILE` (or `SKIFF_CONFIG`), a YAML map from flag names
//! (as on the command line, without dashes) to values, e.g.
//!
//! ```yaml
//! data-dir: /var/lib/skiff
//! port: 6443
//! tls-san: [skiff.example, 10.0.0.5]
//! ```
//!
//! Precedence, highest first: the command line, environment variables (`SKIFF_*`), the config
//! file, built-in defaults. The file's values become the defaults of the chosen subcommand's
//! flags, so clap still validates them and `--help` stays the one reference.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Command;

/// Finds `--config FILE` / `--config=FILE` in `args`, else `SKIFF_CONFIG`.
pub fn find(args: &[OsString]) -> Option<PathBuf> {
    let mut iter = args.iter().skip(1);
    while let Some(arg) = iter.next() {
        let arg = arg.to_string_lossy();
        if arg == "--" {
            break;
        }
        if arg == "--config" {
            return iter.next().map(PathBuf::from);
        }
        if let Some(path) = arg.strip_prefix("--config=") {
            return Some(PathBuf::from(path));
        }
    }
    std::env::var_os("SKIFF_CONFIG")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The subcommand named in `args` (the first argument that names one).
fn subcommand<'a>(command: &'a Command, args: &[OsString]) -> Option<&'a Command> {
    args.iter()
        .skip(1)
        .find_map(|a| command.find_subcommand(a.to_string_lossy().as_ref()))
}

/// Makes the values in the config file at `path` the defaults of the subcommand in `args`.
pub fn apply(command: Command, path: &Path, args: &[OsString]) -> Result<Command> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the config file {}", path.display()))?;
    apply_text(command, &text, path, args)
}

/// [`apply`] with the file's text already read (`path` only names it in errors).
pub fn apply_text(command: Command, text: &str, path: &Path, args: &[OsString]) -> Result<Command> {
    let values: std::collections::BTreeMap<String, serde_json::Value> = if text.trim().is_empty() {
        Default::default()
    } else {
        serde_saphyr::from_str(text)
            .with_context(|| format!("the config file {} is not a YAML map", path.display()))?
    };
    let Some(sub) = subcommand(&command, args) else {
        return Ok(command);
    };
    let sub_name = sub.get_name().to_string();
    let mut defaults = Vec::new();
    for (key, value) in values {
        if key == "config" {
            continue;
        }
        let Some(arg) = sub
            .get_arguments()
            .find(|a| a.get_long() == Some(key.as_str()))
        else {
            let known: Vec<_> = sub.get_arguments().filter_map(|a| a.get_long()).collect();
            bail!(
                "the config file {} sets {key:?}, which `skiff {sub_name}` has no flag for (its flags: {})",
                path.display(),
                known.join(", ")
            );
        };
        let values: Vec<String> = match value {
            serde_json::Value::Array(items) => items.iter().map(scalar).collect::<Result<_>>()?,
            other => vec![scalar(&other)?],
        };
        defaults.push((arg.get_id().clone(), values));
    }
    Ok(command.mut_subcommand(sub_name, |mut sc| {
        for (id, values) in defaults {
            sc = sc.mut_arg(id, |a| {
                if values.len() == 1 {
                    a.default_value(values[0].clone())
                } else {
                    a.default_values(values)
                }
            });
        }
        sc
    }))
}

fn scalar(value: &serde_json::Value) -> Result<String> {
    Ok(match value {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Bool(b) => b.to_string(),
        serde_json::Value::Number(n) => n.to_string(),
        other => bail!("config values must be scalars or lists of scalars, not {other}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, ArgAction};

    fn cli() -> Command {
        Command::new("skiff").subcommand(
            Command::new("server")
                .arg(Arg::new("port").long("port").default_value("6443"))
                .arg(
                    Arg::new("tls_san")
                        .long("tls-san")
                        .action(ArgAction::Append),
                )
                .arg(Arg::new("paused").long("paused").action(ArgAction::SetTrue)),
        )
    }

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    fn parse(yaml: &str, argv: &[&str]) -> Result<clap::ArgMatches> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, yaml)?;
        let argv = args(argv);
        Ok(apply(cli(), &path, &argv)?.try_get_matches_from(argv)?)
    }

    #[test]
    fn the_file_sets_defaults_and_the_command_line_wins() {
        let m = parse(
            "port: 7000\ntls-san: [a, b]\npaused: true\n",
            &["skiff", "server"],
        )
        .unwrap();
        let sub = m.subcommand_matches("server").unwrap();
        assert_eq!(sub.get_one::<String>("port").unwrap(), "7000");
        let sans: Vec<_> = sub.get_many::<String>("tls_san").unwrap().collect();
        assert_eq!(sans, ["a", "b"]);
        assert!(sub.get_flag("paused"));

        let m = parse("port: 7000\n", &["skiff", "server", "--port", "8000"]).unwrap();
        let sub = m.subcommand_matches("server").unwrap();
        assert_eq!(sub.get_one::<String>("port").unwrap(), "8000");
    }

    #[test]
    fn unknown_keys_and_bad_yaml_are_clear_errors() {
        let err = parse("prot: 7000\n", &["skiff", "server"]).unwrap_err();
        assert!(err.to_string().contains("\"prot\""), "{err}");
        let err = parse("- just\n- a list\n", &["skiff", "server"]).unwrap_err();
        assert!(err.to_string().contains("not a YAML map"), "{err}");
        let err = parse("port: {a: 1}\n", &["skiff", "server"]).unwrap_err();
        assert!(err.to_string().contains("scalars"), "{err}");
    }

    #[test]
    fn finds_the_config_flag() {
        assert_eq!(
            find(&args(&["skiff", "server", "--config", "/x.yaml"])),
            Some(PathBuf::from("/x.yaml"))
        );
        assert_eq!(
            find(&args(&["skiff", "--config=/y.yaml", "server"])),
            Some(PathBuf::from("/y.yaml"))
        );
    }
}
