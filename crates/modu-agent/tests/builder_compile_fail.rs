//! The builder's typestate: choosing the context or output type after adding something typed
//! by it does not compile, and the intended order does.

#[test]
fn builder_ordering() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/builder_order_ok.rs");
    t.compile_fail("tests/ui/output_after_tool.rs");
    t.compile_fail("tests/ui/context_after_agent_layer.rs");
    t.compile_fail("tests/ui/tool_of_other_context.rs");
}
