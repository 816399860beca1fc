#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    modu_fuzz_harness::mcp_tool_result(data);
});
