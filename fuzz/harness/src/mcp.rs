//! `mcp_tool_result`: the JSON `result` of a `tools/call` answer through rmcp's decoding and
//! modu-mcp's normalisation into the tool's output (or error message).

const SECRET: &str = "s3cr3t-token-value";

/// Byte 0 (bit 0) says whether the secret is known to the session; the rest is the JSON.
///
/// Properties: no panic; an error message never holds a known secret, and is at most the
/// error-text cap (4000 bytes) plus the ellipsis before redaction.
pub fn mcp_tool_result(data: &[u8]) {
    let Some((&flags, json)) = data.split_first() else {
        return;
    };
    let secrets = if flags & 1 == 1 {
        vec![SECRET.to_owned()]
    } else {
        Vec::new()
    };
    match modu_mcp::fuzzing::normalise_tool_result(json, &secrets) {
        Ok(value) => {
            let _ = value.to_string();
        }
        Err(Some(message)) => {
            if !secrets.is_empty() {
                assert!(!message.contains(SECRET), "the secret leaked: {message}");
            }
            assert!(
                message.len() <= 4000 + '…'.len_utf8() || !secrets.is_empty(),
                "the error text is not capped: {} bytes",
                message.len()
            );
        }
        Err(None) => {}
    }
}
