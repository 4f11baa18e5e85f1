//! The bodies of skiff's fuzz targets: one function per parser that takes bytes from outside,
//! each taking the raw input and panicking only when it finds a bug (a panic in the parser, or a
//! property of its output that does not hold).
//!
//! They live in a library of the workspace, not in the cargo fuzz package (`fuzz/`, a workspace
//! of its own), so that two things run the same code: the libFuzzer binaries
//! (`fuzz/fuzz_targets/*.rs`, one line each) and the workspace's plain `cargo test`, which
//! replays every committed corpus file through them (`tests/corpus.rs`) without cargo-fuzz or a
//! nightly toolchain.
//!
//! # Layout
//! - [`TARGETS`]: every target by name; the name is its corpus directory, `fuzz/corpus/<name>/`.
//! - [`objects`]: API object bodies (JSON, YAML, protobuf) through decode, defaults, validation.
//! - [`patches`]: the four PATCH types, and validation of what they produce.
//! - [`text`]: selectors, quantities, `continue` tokens, `resourceVersion`, points in history,
//!   CronJob schedules.
//! - [`store`]: the data dir's records and the export archive.
//! - [`files`]: the `--config` file, the node's registries.yaml and kubeconfigs.
//!
//! Three parsers live in crates too heavy to build for a fuzz run (`skiff-api`'s points in
//! history, the `skiff` binary's config file, the kubelet's registries.yaml); their files have
//! no dependency on the rest of their crate and are compiled in here by path (`point`,
//! `config_file`, `files::registries`).

#![recursion_limit = "256"]

pub mod files;
pub mod objects;
pub mod patches;
pub mod store;
pub mod text;

/// A fuzz target: its name and its body.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, by name (the name of its `fuzz_targets/` file and corpus directory).
pub const TARGETS: &[Target] = &[
    ("object_json", objects::json),
    ("object_yaml", objects::yaml),
    ("object_protobuf", objects::protobuf),
    ("patch_json", patches::json),
    ("patch_merge", patches::merge),
    ("patch_strategic", patches::strategic),
    ("patch_apply", patches::apply),
    ("label_selector", text::label_selector),
    ("field_selector", text::field_selector),
    ("quantity", text::quantity),
    ("continue_token", text::continue_token),
    ("resource_version", text::resource_version),
    ("time_point", text::time_point),
    ("cron_schedule", text::cron_schedule),
    ("store_record", store::record),
    ("archive", store::archive),
    ("config_file", files::config_file),
    ("registries_yaml", files::registries_yaml),
    ("kubeconfig", files::kubeconfig),
];

/// The input as text, if it is UTF-8 (every text parser here takes `&str`: HTTP query values and
/// YAML files are checked for UTF-8 before them).
pub(crate) fn utf8(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

/// `skiff-api`'s points in history (`api/src/replay/point.rs`), compiled in by path.
#[path = "../../api/src/replay/point.rs"]
pub mod point;

/// The `skiff` binary's `--config` file (`bin/src/config_file.rs`), compiled in by path.
#[path = "../../bin/src/config_file.rs"]
pub mod config_file;

/// Runs the target `name` on `data` (a fuzz binary's whole body).
///
/// # Panics
/// When `name` is not a target, and wherever the target finds a bug.
pub fn run(name: &str, data: &[u8]) {
    let (_, body) = TARGETS
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no fuzz target {name}"));
    body(data);
}
