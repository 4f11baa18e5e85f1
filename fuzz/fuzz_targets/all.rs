//! Every target in one binary, the one `run.sh` builds: the target is named by the environment
//! variable `SKIFF_FUZZ_TARGET` (see `skiff_fuzz_targets::TARGETS`). Each target linked alone
//! links the whole dependency tree again; CI's bounded run builds this one link instead of one
//! per target. Coverage still guides each run: only the named target's code runs.
#![no_main]

use std::sync::OnceLock;

static TARGET: OnceLock<String> = OnceLock::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let target = TARGET.get_or_init(|| {
        std::env::var("SKIFF_FUZZ_TARGET").expect("SKIFF_FUZZ_TARGET names the target to run")
    });
    skiff_fuzz_targets::run(target, data);
});
