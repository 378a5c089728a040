#!/usr/bin/env bash
# The client packages against a live airlock server: builds airlock from
# this repository, starts `airlock serve` on a temporary unix socket and a
# loopback TCP port with a temporary token, then runs the tests of sdk/js,
# sdk/deepagents-js (one npm workspace: npm ci from sdk/package-lock.json, build, node:test) and
# sdk/python (python3 -m unittest), docs/clients.md's JS and Python
# examples as written (their output checked), then the MCP acceptance test
# (mcpserver/testdata/client) over the server's /mcp. The server is always
# stopped, and every sandbox the tests made must be gone by the end.
#
# AIRLOCK_BIN=path uses that airlock binary instead of building one.
# Needs what `make setup` installs (runsc, dockerd, the default image under
# $AIRLOCK_ROOT), Node 20 with npm, Go, and Python 3.10+.
set -euo pipefail
sdk="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$sdk")"
root="${AIRLOCK_ROOT:-/var/lib/airlock}"
GO="${GO:-go}"

tmp="$(mktemp -d /tmp/airlock-sdk.XXXXXX)"
chmod 700 "$tmp"
server_pid=""
stop() {
	local rc=$?
	if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
		kill -TERM "$server_pid" 2>/dev/null || true
		for _ in $(seq 1 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$server_pid" 2>/dev/null || true
		wait "$server_pid" 2>/dev/null || true
	fi
	if [[ $rc -ne 0 && -s "$tmp/server.log" ]]; then
		echo "== airlock serve's log (last 40 lines)" >&2
		tail -n 40 "$tmp/server.log" >&2
	fi
	rm -rf "$tmp"
	exit $rc
}
trap stop EXIT INT TERM

if [[ -n "${AIRLOCK_BIN:-}" ]]; then
	cp "$AIRLOCK_BIN" "$tmp/airlock"
else
	echo "== building airlock"
	(cd "$repo" && "$GO" build -o "$tmp/airlock" ./cmd/airlock)
fi

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$tmp/token"
chmod 600 "$tmp/token"
# A low sandbox cap, so that the tests can reach it (over_limit).
export AIRLOCK_TEST_MAX_SANDBOXES=16
"$tmp/airlock" --root "$root" serve --socket "$tmp/airlock.sock" --listen 127.0.0.1:0 \
	--token-file "$tmp/token" --addr-file "$tmp/addr" --max-sandboxes "$AIRLOCK_TEST_MAX_SANDBOXES" \
	> "$tmp/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 300); do
	[[ -s "$tmp/addr" && -S "$tmp/airlock.sock" ]] && break
	kill -0 "$server_pid" 2>/dev/null || { echo "airlock serve exited before it listened" >&2; exit 1; }
	sleep 0.1
done
[[ -s "$tmp/addr" ]] || { echo "airlock serve did not listen within 30s" >&2; exit 1; }
export AIRLOCK_SOCKET="$tmp/airlock.sock"
export AIRLOCK_URL="http://$(cat "$tmp/addr")"
AIRLOCK_TOKEN="$(cat "$tmp/token")"
export AIRLOCK_TOKEN
echo "== airlock serve on unix:$AIRLOCK_SOCKET and $AIRLOCK_URL"

echo "== sdk: one npm ci and one build of the workspace (js, then deepagents-js)"
(cd "$sdk" && npm ci --no-audit --no-fund --loglevel=error && rm -rf js/dist deepagents-js/dist && npm run --silent build)
echo "== sdk/js's types are what openapi-typescript makes of server/openapi.json"
(cd "$sdk/js" && npm run --silent check:types) || { echo "sdk/js/src/api.ts is stale: run \`npm run gen:types\` in sdk/js and commit it" >&2; exit 1; }
echo "== sdk/deepagents-js builds from its own directory too (it builds sdk/js first)"
(cd "$sdk" && rm -rf js/dist deepagents-js/dist && cd deepagents-js && npm run --silent build)
echo "== sdk/js"
(cd "$sdk/js" && npm test)
echo "== sdk/deepagents-js"
(cd "$sdk/deepagents-js" && npm test)
echo "== sdk/python"
(cd "$sdk/python" && python3 -m unittest -v 2>&1)

echo "== docs/clients.md's JS and Python examples, as written"
# The first js block (the second needs a model) and the python block.
awk '/^```js$/ {n++; if (n == 1) {on = 1; next}} /^```$/ {on = 0} on' "$repo/docs/clients.md" > "$tmp/example.mjs"
awk '/^```python$/ {on = 1; next} /^```$/ {on = 0} on' "$repo/docs/clients.md" > "$tmp/example.py"
mkdir -p "$tmp/node_modules" && ln -s "$sdk/js" "$tmp/node_modules/airlock-sandbox"
got="$(cd "$tmp" && node example.mjs 2>"$tmp/example.err")"
want=$'42\nexited 0 58\none-shot'
[[ "$got" == "$want" && "$(cat "$tmp/example.err")" == working ]] ||
	{ printf 'docs/clients.md'"'"'s JS example printed\n%s\nand on stderr\n%s\nnot\n%s\nand working\n' "$got" "$(cat "$tmp/example.err")" "$want" >&2; exit 1; }
got="$(cd "$tmp" && PYTHONPATH="$sdk/python" python3 example.py 2>&1)"
want=$'42\nexited 0\n42\n\nfile_not_found'
[[ "$got" == "$want" ]] || { printf 'docs/clients.md'"'"'s Python example printed\n%s\nnot\n%s\n' "$got" "$want" >&2; exit 1; }

echo "== MCP over streamable HTTP: airlock serve's /mcp, behind the token"
(cd "$repo/mcpserver/testdata/client" && npm ci --no-audit --no-fund --loglevel=error &&
	MCP_URL="$AIRLOCK_URL/mcp" MCP_TOKEN="$AIRLOCK_TOKEN" AIRLOCK_BIN="$tmp/airlock" AIRLOCK_ROOT="$root" npm test)

echo "== no sandbox left behind"
left="$(cd "$sdk/python" && python3 -c '
import airlock_sandbox as al
print(" ".join(s["id"] for s in al.Sandbox.list() if (s.get("labels") or {}).get("suite", "").startswith("sdk-")))')"
if [[ -n "$left" ]]; then
	echo "sandboxes the tests made are still there: $left" >&2
	exit 1
fi
echo "== sdk: all passed in ${SECONDS}s"
