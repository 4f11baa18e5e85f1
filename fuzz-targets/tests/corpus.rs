//! Replays every committed corpus file of every fuzz target (`fuzz/corpus/<target>/`) through
//! the target's body, so that the plain `cargo test` checks the corpus (and with it every crash
//! the fuzzers found, kept there as `crash-*`) without cargo-fuzz or a nightly toolchain.

use std::path::PathBuf;

use skiff_fuzz_targets::TARGETS;

/// This package's directory: where `cargo test` says it is at run time, else where it was at
/// build time (a binary built in another checkout sharing the build directory reads this one's).
fn package_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), Into::into)
}

fn corpus_dir(target: &str) -> PathBuf {
    package_dir().join("../fuzz/corpus").join(target)
}

#[test]
fn every_target_has_a_corpus_and_each_file_passes() {
    let mut replayed = 0;
    for (name, body) in TARGETS {
        let dir = corpus_dir(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("a directory entry").path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{name} has no seed corpus");
        for file in files {
            let data = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let outcome = std::panic::catch_unwind(|| body(&data));
            assert!(outcome.is_ok(), "{name}: {} fails", file.display());
            replayed += 1;
        }
    }
    eprintln!(
        "replayed {replayed} corpus files through {} targets",
        TARGETS.len()
    );
}

#[test]
fn every_target_has_a_fuzz_binary() {
    let dir = package_dir().join("../fuzz/fuzz_targets");
    for (name, _) in TARGETS {
        let file = dir.join(format!("{name}.rs"));
        assert!(file.exists(), "{} is missing", file.display());
    }
}
