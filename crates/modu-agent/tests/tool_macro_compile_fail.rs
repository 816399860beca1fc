//! `#[tool]` options with values that cannot work are compile errors on the value.

#[test]
fn bad_tool_options_do_not_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/tool_bad_timeout.rs");
    t.compile_fail("tests/ui/tool_reference_param.rs");
}
