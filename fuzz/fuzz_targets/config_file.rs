//! Fuzz target `config_file`: see `skiff_fuzz_targets::TARGETS`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    skiff_fuzz_targets::run("config_file", data);
});
