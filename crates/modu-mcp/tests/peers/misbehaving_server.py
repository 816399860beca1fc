"""A misbehaving MCP server for modu-mcp's tests.

Usage:
  python misbehaving_server.py stdio [--delay-initialize SECONDS] [--fail-initialize]
                                     [--log FILE] [--record FILE] [--answer-version V]
                                     [--json-logs] [--duplicate-tool] [MARKER...]
  python misbehaving_server.py http PORT TOKEN
  python misbehaving_server.py http-raw PORT json|sse

stdio: a hand-written JSON-RPC loop (standard library only, so it starts fast) that writes
raw lines to stdout, which the SDKs would refuse to produce. Tools:

- ok(text)                        a normal text result ("ok: <text>")
- invalid_utf8(id_last=False)     a result line with bytes that are not UTF-8
- deep_nesting(depth=10000)       structuredContent nested `depth` arrays deep
- big_structured(bytes, id_last=False)
                                  structuredContent of about `bytes` bytes
- big_text(bytes)                 one text block of `bytes` bytes ("0123456789" repeated)
- echo_env(names)                 the values of these environment variables, as text and
                                  as structuredContent
- no_id_answer()                  a broken line that names no request id
- banner_then_ok()                a line that is not JSON, then a normal result
- slow(seconds)                   answers after `seconds` (in a thread)
- crash()                         exits without answering
- busy(seconds)                   answers after `seconds` without reading stdin meanwhile (a
                                  single-threaded server busy in a tool)

`id_last` puts "id" after "result", as the TypeScript SDK orders its answers.
--delay-initialize waits before answering initialize; --fail-initialize then exits instead
of answering; --log appends "PID METHOD" to FILE for every message received; --record
appends every message received to FILE, one JSON line each; --answer-version answers
initialize with protocol version V (else with the version the client asked for);
--json-logs writes structured log lines to stdout, as a JSON logger would (one when it
starts, `{"level":"info","msg":"server started"}`, and one before every answer);
--duplicate-tool lists a second tool named `ok` (described "A second tool named ok.") after
the others.

http-raw: the tools ok, invalid_utf8, deep_nesting, big_structured and big_text over a
hand-written streamable-HTTP endpoint at /mcp, each answer one JSON body or one SSE event.

http: an MCPServer (PyPI `mcp` 2.x) on 127.0.0.1:PORT/mcp that accepts only the bearer
token TOKEN; its tool whoami() echoes the token it was called with, as text and as
structuredContent.
"""

import json
import os
import sys
import threading
import time

write_lock = threading.Lock()


def write_raw(data: bytes) -> None:
    with write_lock:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()


def send(message: dict) -> None:
    write_raw(json.dumps(message, separators=(",", ":")).encode() + b"\n")


def result_line(request_id, result_json: bytes, id_last: bool = False) -> bytes:
    rid = json.dumps(request_id).encode()
    if id_last:
        return b'{"jsonrpc":"2.0","result":' + result_json + b',"id":' + rid + b"}\n"
    return b'{"jsonrpc":"2.0","id":' + rid + b',"result":' + result_json + b"}\n"


def text_result(text: str) -> dict:
    return {"content": [{"type": "text", "text": text}]}


OBJECT = {"type": "object"}
TOOLS = [
    {"name": "ok", "description": "A normal text result.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
    {"name": "invalid_utf8", "description": "A result that is not UTF-8.",
     "inputSchema": {"type": "object", "properties": {"id_last": {"type": "boolean"}}}},
    {"name": "deep_nesting", "description": "structuredContent nested very deep.",
     "inputSchema": {"type": "object", "properties": {"depth": {"type": "integer"}}}},
    {"name": "big_structured", "description": "A large structuredContent value.",
     "inputSchema": {"type": "object", "properties": {"bytes": {"type": "integer"},
                                                      "id_last": {"type": "boolean"}},
                     "required": ["bytes"]}},
    {"name": "big_text", "description": "A large text result.",
     "inputSchema": {"type": "object", "properties": {"bytes": {"type": "integer"}},
                     "required": ["bytes"]}},
    {"name": "echo_env", "description": "Echo environment variables.",
     "inputSchema": {"type": "object", "properties": {"names": {"type": "array", "items": {"type": "string"}}},
                     "required": ["names"]}},
    {"name": "no_id_answer", "description": "An answer without an id.", "inputSchema": OBJECT},
    {"name": "banner_then_ok", "description": "Noise on stdout, then an answer.", "inputSchema": OBJECT},
    {"name": "crash", "description": "Exit without answering.", "inputSchema": OBJECT},
    {"name": "slow", "description": "Answer after some seconds.",
     "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}},
    {"name": "busy", "description": "Answer after some seconds, not reading meanwhile.",
     "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}},
]


PLAIN_TOOLS = ("ok", "invalid_utf8", "deep_nesting", "big_structured", "big_text")


def plain_answer(request_id, name: str, args: dict) -> bytes:
    """The answer line (without its newline) of a tool that only answers (PLAIN_TOOLS)."""
    if name == "ok":
        result = json.dumps(text_result("ok: " + str(args.get("text", "")))).encode()
        return result_line(request_id, result)[:-1]
    if name == "invalid_utf8":
        result = b'{"content":[{"type":"text","text":"bad \xff\xfe bytes"}]}'
        return result_line(request_id, result, bool(args.get("id_last")))[:-1]
    if name == "deep_nesting":
        depth = int(args.get("depth", 10000))
        result = b'{"content":[],"structuredContent":{"deep":' + b"[" * depth + b"]" * depth + b"}}"
        return result_line(request_id, result)[:-1]
    if name == "big_structured":
        size = int(args["bytes"])
        item = "x" * 1000
        items = ",".join(json.dumps(item) for _ in range(max(1, size // 1003)))
        result = ('{"content":[{"type":"text","text":"big"}],"structuredContent":{"items":[' + items + "]}}").encode()
        return result_line(request_id, result, bool(args.get("id_last")))[:-1]
    size = int(args["bytes"])
    text = ("0123456789" * (size // 10 + 1))[:size]
    return result_line(request_id, json.dumps(text_result(text)).encode())[:-1]


def call_tool(request_id, name: str, args: dict) -> None:
    if name in PLAIN_TOOLS:
        write_raw(plain_answer(request_id, name, args) + b"\n")
    elif name == "echo_env":
        values = {n: os.environ.get(n, "") for n in args["names"]}
        text = " ".join(f"{n}={v}" for n, v in values.items())
        send({"jsonrpc": "2.0", "id": request_id,
              "result": {"content": [{"type": "text", "text": text}], "structuredContent": values}})
    elif name == "no_id_answer":
        write_raw(b'{"jsonrpc":"2.0","result":{"content":[]},"oops":}\n')
    elif name == "banner_then_ok":
        write_raw(b"starting up, this line is not JSON-RPC\n")
        send({"jsonrpc": "2.0", "id": request_id, "result": text_result("after the banner")})
    elif name == "crash":
        sys.stdout.flush()
        os._exit(1)
    elif name == "slow":
        def later():
            time.sleep(float(args["seconds"]))
            send({"jsonrpc": "2.0", "id": request_id, "result": text_result("slept")})
        threading.Thread(target=later, daemon=True).start()
    elif name == "busy":
        time.sleep(float(args["seconds"]))
        send({"jsonrpc": "2.0", "id": request_id, "result": text_result("done")})
    else:
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602, "message": f"unknown tool {name}"}})


def serve_stdio(argv: list) -> None:
    delay = 0.0
    fail_initialize = False
    log = None
    record = None
    answer_version = None
    json_logs = False
    duplicate_tool = False
    i = 0
    while i < len(argv):
        if argv[i] == "--delay-initialize":
            delay = float(argv[i + 1])
            i += 1
        elif argv[i] == "--fail-initialize":
            fail_initialize = True
        elif argv[i] == "--log":
            log = argv[i + 1]
            i += 1
        elif argv[i] == "--record":
            record = argv[i + 1]
            i += 1
        elif argv[i] == "--answer-version":
            answer_version = argv[i + 1]
            i += 1
        elif argv[i] == "--json-logs":
            json_logs = True
        elif argv[i] == "--duplicate-tool":
            duplicate_tool = True
        i += 1
    if json_logs:
        send({"level": "info", "msg": "server started"})
    for raw in sys.stdin.buffer:
        if not raw.strip():
            continue
        message = json.loads(raw)
        method = message.get("method")
        request_id = message.get("id")
        if log:
            with open(log, "a") as f:
                f.write(f"{os.getpid()} {method}\n")
        if record:
            with open(record, "a") as f:
                f.write(json.dumps(message) + "\n")
        if request_id is None:
            continue  # a notification
        if json_logs:
            send({"level": "debug", "msg": f"handling {method}", "time": time.time()})
        if method == "initialize":
            time.sleep(delay)
            if fail_initialize:
                sys.exit(3)
            send({"jsonrpc": "2.0", "id": request_id, "result": {
                "protocolVersion": answer_version or message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "misbehaving", "version": "1.0.0"},
            }})
        elif method == "tools/list":
            tools = TOOLS
            if duplicate_tool:
                tools = TOOLS + [{"name": "ok", "description": "A second tool named ok.",
                                  "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}},
                                                  "required": ["n"]}}]
            send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": tools}})
        elif method == "tools/call":
            params = message.get("params") or {}
            call_tool(request_id, params.get("name", ""), params.get("arguments") or {})
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": request_id, "result": {}})
        else:
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "Method not found"}})


def serve_http_raw(port: int, mode: str) -> None:
    """A hand-written streamable-HTTP endpoint at /mcp answering with the raw bytes of
    plain_answer, as one JSON body (mode "json") or one SSE event (mode "sse")."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def reply(self, status: int, body: bytes = b"", content_type: str = "application/json"):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Mcp-Session-Id", "raw-1")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self.reply(405)

        def do_DELETE(self):
            self.reply(200)

        def do_POST(self):
            message = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            request_id = message.get("id")
            method = message.get("method")
            if request_id is None:
                return self.reply(202)
            if method == "initialize":
                line = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {
                    "protocolVersion": message["params"]["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "misbehaving-raw", "version": "1.0.0"},
                }}).encode()
            elif method == "tools/list":
                tools = [t for t in TOOLS if t["name"] in PLAIN_TOOLS]
                line = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {"tools": tools}}).encode()
            elif method == "tools/call":
                params = message.get("params") or {}
                line = plain_answer(request_id, params.get("name", ""), params.get("arguments") or {})
            else:
                line = json.dumps({"jsonrpc": "2.0", "id": request_id,
                                   "error": {"code": -32601, "message": "Method not found"}}).encode()
            if mode == "sse":
                self.reply(200, b"event: message\ndata: " + line + b"\n\n", "text/event-stream")
            else:
                self.reply(200, line)

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def serve_http(port: int, token: str) -> None:
    from typing import Any

    from mcp.server.auth.middleware.auth_context import get_access_token
    from mcp.server.auth.provider import AccessToken
    from mcp.server.auth.settings import AuthSettings
    from mcp.server.mcpserver import MCPServer

    class StaticVerifier:
        async def verify_token(self, presented: str):
            if presented == token:
                return AccessToken(token=presented, client_id="modu-test", scopes=[])
            return None

    base = f"http://127.0.0.1:{port}"
    server = MCPServer(
        "misbehaving-http",
        token_verifier=StaticVerifier(),
        auth=AuthSettings(issuer_url=base, resource_server_url=f"{base}/mcp"),
    )

    @server.tool(description="Echo the bearer token this call carried.", structured_output=True)
    def whoami() -> dict[str, Any]:
        access = get_access_token()
        seen = access.token if access else ""
        return {"authorization": f"Bearer {seen}", "note": f"you called with {seen}"}

    @server.tool(description="A large text result.", structured_output=False)
    def big_text(bytes: int) -> str:
        return ("0123456789" * (bytes // 10 + 1))[:bytes]

    server.run(transport="streamable-http", host="127.0.0.1", port=port)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "http":
        serve_http(int(sys.argv[2]), sys.argv[3])
    elif len(sys.argv) > 1 and sys.argv[1] == "http-raw":
        serve_http_raw(int(sys.argv[2]), sys.argv[3])
    else:
        serve_stdio(sys.argv[2:])
