#!/usr/bin/env bash
# The client command the MCP conformance suite starts for tests/oauth_cli.rs:
#   oauth_signin.sh <modu binary> <server url>
# It writes a modu.toml whose one server is the suite's (with `auth.oauth`), runs
# `modu mcp tools --json` against it, and plays the person at the browser: when modu prints the
# authorization URL, it opens it and follows the redirects, which end at modu's loopback
# callback. modu's stderr and stdout are kept in $MODU_SIGNIN_OUT (a folder the test reads).
set -euo pipefail
modu="$1"
url="${*: -1}"
out="${MODU_SIGNIN_OUT:?}"
mkdir -p "$out"
# The server's URL names its tokens in the store ("suite <url>"): the test looks them up.
printf '%s' "$url" > "$out/url"
# The store is memory unless the test sets MODU_STORE__* (they override this file).
cat > "$out/modu.toml" <<TOML
[store]
kind = "memory"

[[mcp.servers]]
name = "suite"
transport = "streamable_http"
url = "$url"

[mcp.servers.auth.oauth]
TOML
"$modu" --config "$out/modu.toml" mcp tools --json > "$out/stdout" 2> "$out/stderr" &
pid=$!
opened=""
for _ in $(seq 1 200); do
    if [ -z "$opened" ]; then
        link=$(grep -o 'https\?://[^ ]*authorize[^ ]*' "$out/stderr" | head -n 1 || true)
        if [ -n "$link" ]; then
            # A browser: GET the authorization URL and follow every redirect.
            python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=20).read()' "$link"
            opened=yes
        fi
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
        break
    fi
    sleep 0.1
done
wait "$pid"
