#!/usr/bin/env python3
"""Writes the hand-made seed inputs of every target but `checkpoint` (whose seeds are real
checkpoints from `make-seeds`) into fuzz/corpus/<target>/seed_*. Run from anywhere; the
corpora are then minimised with `cargo fuzz cmin` (see fuzz/README.md)."""
import json, os, pathlib

FUZZ = pathlib.Path(__file__).resolve().parent.parent
CORPUS = FUZZ / "corpus"


def write(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    (d / f"seed_{name}").write_bytes(data)


def sse(*events, done=True, crlf=False):
    nl = "\r\n" if crlf else "\n"
    body = "".join(f"data: {json.dumps(e) if not isinstance(e, str) else e}{nl}{nl}" for e in events)
    if done:
        body += f"data: [DONE]{nl}{nl}"
    return body


def chunk(delta=None, finish=None, usage=None, index=0):
    c = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": []}
    if delta is not None or finish is not None:
        c["choices"].append({"index": index, "delta": delta or {}, "finish_reason": finish})
    if usage:
        c["usage"] = usage
    return c


def tc(index, id=None, name=None, args=None):
    f = {}
    if name is not None:
        f["name"] = name
    if args is not None:
        f["arguments"] = args
    call = {"index": index, "function": f}
    if id:
        call["id"] = id
        call["type"] = "function"
    return {"tool_calls": [call]}


USAGE = {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}
sse_bodies = {
    "text": sse(chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"}), chunk({"content": "lo é🙂"}),
                chunk(finish="stop"), chunk(usage=USAGE)),
    "tool_calls": sse(chunk(tc(0, "call_a", "add", "")), chunk(tc(0, args='{"a": ')), chunk(tc(0, args="1, \"b\": 2}")),
                      chunk(tc(1, "call_b", "search", '{"q":"x"}')), chunk(finish="tool_calls"), chunk(usage=USAGE)),
    "object_args_no_id": sse(chunk({"tool_calls": [{"function": {"name": "f", "arguments": {"x": [1, 2.5, None]}}}]}),
                             chunk(finish="tool_calls")),
    "no_done_after_finish": sse(chunk({"content": "ok"}), chunk(finish="length"), done=False),
    "cut": sse(chunk({"content": "partial"}), done=False),
    "error_event": sse(chunk({"content": "a"}), {"error": {"message": "boom", "type": "server_error", "code": 500}}),
    "vllm_error": sse({"object": "error", "message": "This model's maximum context length is 4096 tokens", "type": "BadRequestError", "code": 400}),
    "crlf": sse(chunk({"content": "x"}), chunk(finish="stop"), crlf=True),
    "comments_and_fields": ": keep-alive\n\nevent: message\nid: 7\nretry: 100\ndata: " + json.dumps(chunk({"content": "multi"})) +
                           "\n\ndata: {\"choices\":[{\"index\":0,\"delta\":\n" + "data: {\"content\":\"line\"}}]}\n\n" +
                           "data: " + json.dumps(chunk(finish="content_filter")) + "\n\ndata: [DONE]\n\n",
    "other_choice": sse(chunk({"content": "ignored"}, index=1), chunk({"content": "kept"}), chunk(finish="eos")),
    "invalid_json": "data: {\"choices\": [\n\n",
    "empty_data": "data:\n\ndata: \n\n" + sse(chunk(finish="stop")),
    "nameless_call": sse(chunk(tc(0, "c", None, "{}")), chunk(finish="tool_calls")),
    "completion_json": json.dumps({"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1}"}}]}, "finish_reason": "tool_calls"}], "usage": USAGE}),
}
for name, body in sse_bodies.items():
    write("openai_sse", name, b"\x00" + body.encode())
write("openai_sse", "text_bytewise", b"\x01\x00" + sse_bodies["text"].encode())
write("openai_sse", "tool_calls_cuts", b"\x03\x04\x10\x00" + sse_bodies["tool_calls"].encode())
write("openai_sse", "crlf_split", b"\x02\x05\x00" + sse_bodies["crlf"].encode())

nd = lambda *lines, end="\n": "".join(json.dumps(l) + end for l in lines)
ollama_bodies = {
    "text": nd({"model": "m", "message": {"role": "assistant", "content": "Hel"}, "done": False},
               {"model": "m", "message": {"role": "assistant", "content": "lo ü🙂"}, "done": False},
               {"model": "m", "message": {"role": "assistant", "content": ""}, "done": True, "done_reason": "stop", "prompt_eval_count": 9, "eval_count": 3}),
    "tool_calls": nd({"message": {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "add", "arguments": {"a": 1, "b": 2}}},
        {"id": "c2", "function": {"index": 5, "name": "search", "arguments": "{\"q\":1}"}}]}, "done": False},
        {"message": {"role": "assistant", "content": ""}, "done": True}),
    "length": nd({"message": {"content": "abc"}, "done": True, "done_reason": "length"}),
    "no_newline_at_end": nd({"message": {"content": "x"}, "done": True}, end=""),
    "cut": nd({"message": {"content": "partial"}, "done": False}),
    "error": nd({"message": {"content": "a"}, "done": False}, {"error": "model 'x' not found"}),
    "invalid": "{\"message\": \n",
    "crlf_blank": "\r\n\r\n" + nd({"message": {"content": "x"}, "done": True, "done_reason": "other"}, end="\r\n"),
    "null_args": nd({"message": {"tool_calls": [{"function": {"name": "f", "arguments": None}}]}, "done": True}),
}
for name, body in ollama_bodies.items():
    write("ollama_ndjson", name, b"\x00" + body.encode())
write("ollama_ndjson", "text_bytewise", b"\x01\x00" + ollama_bodies["text"].encode())
write("ollama_ndjson", "tool_calls_cuts", b"\x02\x07\x00" + ollama_bodies["tool_calls"].encode())

args = [
    (0, "{}"), (0, ""), (0, "  "), (0, "[1,2]"), (0, "null"), (0, "{\"a\":"), (0, "{\"x\": 1e400}"),
    (1, "{\"a\": 5, \"b\": 1.5}"), (1, "{\"a\": 101}"), (1, "{\"a\": 1.0, \"b\": 0.25}"), (1, "{\"a\": 3, \"zz\": 1}"),
    (1, "{\"a\": -9223372036854775809}"),
    (2, "{\"s\": \"ab-c1\", \"e\": \"x\", \"c\": 1}"), (2, "{\"s\": \"AB\"}"), (2, "{\"s\": \"a\", \"e\": {\"k\": [1, 2]}, \"c\": 1.0}"),
    (2, "{\"s\": \"a\", \"f\": \"2024-01-01T00:00:00Z\"}"), (2, "{\"s\": \"\\ud800\"}"),
    (3, "{\"root\": {\"v\": 1, \"next\": {\"v\": 2, \"next\": {\"v\": 3}}}, \"u\": [true, false], \"w\": 4, \"m\": {\"x-a\": \"b\"}}"),
    (3, "{\"u\": [true, true]}"), (3, "{\"forbidden\": 1}"), (3, "{\"root\": {\"next\": {}}}"),
    (4, "{\"query\": \"q\", \"mode\": \"fast\"}"), (4, "{\"query\": \"q\", \"mode\": {\"exact\": {\"digits\": 3}}, \"limit\": 4294967296, \"tags\": [\"a\"], \"inner\": {\"ratio\": 1e39}}"),
    (4, "{\"query\": 1}"), (5, "{}"),
]
for i, (pick, a) in enumerate(args):
    write("tool_arguments", f"{i:02}", bytes([pick]) + a.encode())

skills = {
    "valid": "---\nname: demo\ndescription: Shows the format.\n---\n# Demo\nDo it well.\n",
    "full": open(FUZZ.parent / "crates/modu-skills/examples/skills/invoice-review/SKILL.md").read(),
    "lists": "---\nname: list-tools\ndescription: d\nallowed-tools: [read, write.file, my-tool]\napplies-to: finalize\nmetadata:\n  n: 1\n  b: true\n  nested: {a: 1}\n---\nbody\n",
    "bad": "---\nname: Bad_Name\ndescription: \"\"\nallowed_tools: x\nversion: 1\ncompatibility: \"\"\napplies-to: [plan, nowhere]\n---\n",
    "unterminated": "---\nname: x\n",
    "no_front_matter": "# Just markdown\n",
    "bom_crlf": "\ufeff---\r\nname: crlf\r\ndescription: windows\r\n---\r\nbody\r\n",
    "anchors": "---\nname: &n anchors\ndescription: *n\nmetadata: &m {a: b}\nlicense: !!str 3\n---\n",
    "flow_and_block": "---\n{name: flow, description: >-\n  folded\n  text, compatibility: |\n  literal\n}\n---\n",
    "invalid_yaml": "---\nname: [unclosed\n---\n",
    "long": "---\nname: " + "a" * 70 + "\ndescription: " + "d" * 1100 + "\n---\n",
    "empty_front": "---\n---\nbody\n",
    "dashes_in_body": "---\nname: x\ndescription: y\n---\n---\nmore\n---\n",
}
for name, text in skills.items():
    write("skill_front_matter", name, text)

def mcp(name, value, secret=False, raw=None):
    write("mcp_tool_result", name, bytes([1 if secret else 0]) + (raw if raw is not None else json.dumps(value).encode()))

mcp("text", {"content": [{"type": "text", "text": "hello"}]})
mcp("texts", {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "isError": False})
mcp("mixed", {"content": [{"type": "text", "text": "a"}, {"type": "image", "data": "aGk=", "mimeType": "image/png"},
                           {"type": "resource", "resource": {"uri": "file:///x", "text": "t", "mimeType": "text/plain"}},
                           {"type": "resource_link", "uri": "file:///y", "name": "y"},
                           {"type": "audio", "data": "AA==", "mimeType": "audio/wav", "annotations": {"audience": ["user"], "priority": 0.5}}]})
mcp("structured", {"content": [], "structuredContent": {"temp": 21.5, "unit": "C"}})
mcp("structured_null", {"structuredContent": None})
mcp("error_secret", {"content": [{"type": "text", "text": "auth failed for s3cr3t-token-value"}], "isError": True}, secret=True)
mcp("error_long", {"content": [{"type": "text", "text": "é" * 2500}], "isError": True})
mcp("error_empty", {"content": [], "isError": True})
mcp("error_many", {"content": [{"type": "text", "text": "a"}, {"type": "image", "data": "", "mimeType": "x"}], "isError": True})
mcp("empty", {})
mcp("meta_result_type", {"resultType": "complete", "content": [{"type": "text", "text": "x", "_meta": {"k": 1}}], "_meta": {"progressToken": 1}})
mcp("other_result", {"tools": [], "nextCursor": None})
mcp("not_json", None, raw=b"{\"content\": [")

toml_seeds = {
    "readme": open(FUZZ.parent / "crates/modu-cli/README.md").read().split("```toml\n", 1)[1].split("```", 1)[0],
    "empty": "",
    "minimal": "[model]\nmodel = \"qwen\"\n",
    "unknown": "[model]\nfoo = 1\n[modle]\n",
    "bad_toml": "[model]\nmodel = \n",
    "redis_without_url": "[store]\nkind = \"redis\"\n",
    "servers": "[[mcp.servers]]\nname = \"a\"\ntransport = \"streamable_http\"\nurl = \"http://127.0.0.1:1/mcp\"\nauth = { bearer_token_env = \"T\" }\n[[mcp.servers]]\nname = \"a\"\ntransport = \"stdio\"\ncommand = \"x\"\n",
    "env": "[model]\nmodel = \"a\"\n\n#--env--\nMODU_MODEL__MODEL=b\nMODU_LIMITS__MAX_TURNS=3\nMODU_MCP__SERVERS=[{\"name\":\"e\",\"transport\":\"stdio\",\"command\":\"node\"}]\nMODU_STORE__KIND=disk\nMODU_X=1\nMODU_A__B__C=1\nMODU_MCP__REQUIRE_APPROVAL=[\"*\"]\n",
    "env_not_table": "model = 1\n\n#--env--\nMODU_MODEL__MODEL=b\n",
    "types": "[limits]\nmax_turns = -1\ntimeout_seconds = \"x\"\n[memory]\nmax_turns = 1e3\n[agent]\npolicy = \"plan_and_execute\"\n",
    "crlf_unicode": "[agent]\r\nname = \"m\u00f6du\"\r\ninstructions = '''\r\nmulti\r\nline'''\r\n",
}
for name, text in toml_seeds.items():
    write("modu_toml", name, text)
print("seeds written")
