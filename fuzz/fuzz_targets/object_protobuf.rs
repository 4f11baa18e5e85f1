//! Fuzz target `object_protobuf`: see `skiff_fuzz_targets::TARGETS`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    skiff_fuzz_targets::run("object_protobuf", data);
});
