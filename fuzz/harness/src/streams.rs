//! `openai_sse` and `ollama_ndjson`: a streamed answer's bytes, cut into pieces where the fuzzer
//! says, through the client's decoder and the run loop's fold into `ChatResponseBuilder`.

use modu_core::{ChatResponse, ModelError};

/// Cuts the input into (piece list, whole body).
///
/// Byte 0 (mod 16) is the number of length bytes that follow; the rest is the body, cut into
/// pieces whose lengths cycle through those bytes (each + 1). No length bytes: one piece. So a
/// seed is `\0` followed by a real body, and `\x01\x00` + body is the body byte by byte.
pub fn pieces(data: &[u8]) -> (Vec<Vec<u8>>, &[u8]) {
    let Some((&k, rest)) = data.split_first() else {
        return (Vec::new(), &[]);
    };
    let k = usize::from(k % 16).min(rest.len());
    let (lengths, body) = rest.split_at(k);
    if lengths.is_empty() {
        return (vec![body.to_vec()], body);
    }
    let mut out = Vec::new();
    let mut pos = 0;
    for &len in lengths.iter().cycle() {
        if pos >= body.len() {
            break;
        }
        let end = (pos + usize::from(len) + 1).min(body.len());
        out.push(body[pos..end].to_vec());
        pos = end;
    }
    (out, body)
}

/// What must not depend on where the body was cut: the error (kind and message), or the text,
/// the calls (name and arguments; ids the server did not send are generated), usage and finish.
fn outcome(r: &Result<ChatResponse, ModelError>) -> String {
    match r {
        Err(e) => format!("error {}: {e}", e.kind()),
        Ok(resp) => {
            let calls: Vec<(&str, &str)> = resp
                .message
                .tool_calls
                .iter()
                .map(|c| (c.name.as_str(), c.arguments.as_str()))
                .collect();
            format!(
                "ok {:?} {:?} {:?} {:?} {:?}",
                resp.message.text(),
                calls,
                resp.usage,
                resp.finish_reason,
                resp.message.role
            )
        }
    }
}

/// Every folded answer has well-formed calls: a non-empty name and arguments that are not blank.
fn check_response(r: &Result<ChatResponse, ModelError>) {
    if let Ok(resp) = r {
        for call in &resp.message.tool_calls {
            assert!(!call.name.is_empty(), "a call without a name was accepted");
            assert!(!call.id.is_empty(), "a call without an id");
            assert!(
                !call.arguments.trim().is_empty(),
                "blank arguments are not normalised to {{}}"
            );
        }
        assert_eq!(resp.usage.requests, 1);
    }
}

/// OpenAI-compatible SSE (`data: {chat.completion.chunk}` events until `[DONE]`).
///
/// Properties: no panic; the outcome does not depend on where the body is cut into network
/// pieces (one piece vs the fuzzer's pieces); the non-streamed decoder of the same bytes does
/// not panic either.
pub fn openai_sse(data: &[u8]) {
    let (cut, body) = pieces(data);
    let whole = futures::executor::block_on(modu_openai::fuzzing::decode_sse_stream(vec![body.to_vec()]));
    check_response(&whole);
    if cut.len() > 1 {
        let split = futures::executor::block_on(modu_openai::fuzzing::decode_sse_stream(cut));
        check_response(&split);
        assert_eq!(
            outcome(&whole),
            outcome(&split),
            "the SSE outcome depends on chunk boundaries"
        );
    }
    let completion = modu_openai::fuzzing::decode_completion(body);
    check_response(&completion);
}

/// Ollama NDJSON (one JSON object per line until `"done": true`).
///
/// Properties: no panic; the outcome does not depend on where the body is cut into pieces.
pub fn ollama_ndjson(data: &[u8]) {
    let (cut, body) = pieces(data);
    let whole = futures::executor::block_on(modu_ollama::fuzzing::decode_ndjson_stream(vec![body.to_vec()]));
    check_response(&whole);
    if cut.len() > 1 {
        let split = futures::executor::block_on(modu_ollama::fuzzing::decode_ndjson_stream(cut));
        check_response(&split);
        assert_eq!(
            outcome(&whole),
            outcome(&split),
            "the NDJSON outcome depends on chunk boundaries"
        );
    }
}
