//! Fuzz target `registries_yaml`: see `skiff_fuzz_targets::TARGETS`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    skiff_fuzz_targets::run("registries_yaml", data);
});
