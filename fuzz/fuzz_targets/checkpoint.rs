#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    modu_fuzz_harness::checkpoint(data);
});
