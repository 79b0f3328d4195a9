#!/usr/bin/env bash
# The README's quick start, exactly as written, from the workspace root: `cargo run --release -- serve` starts
# the daemon on embedded defaults (no external service) and prints its ready line, and the client lines of
# Terminal 2 (`cargo run --release -- ask "hello"`, `... info`) are answered by it. Run by scripts/test.sh, so
# that the README's first two commands cannot break silently (a workspace of several binaries once made
# `cargo run` at the root refuse to choose one).
#
# The commands are the README's; only their environment differs: a data dir of its own and free loopback
# ports (port 0) through AGENTWIRE_DATA_DIR and AGENTWIRE_CONFIG, since the defaults (7777, 7780) may be taken
# on a shared machine.
set -euo pipefail
cd "$(dirname "$0")/.."

# How long the daemon may take to print its ready line once built (it starts in well under a second here).
READY_WITHIN_SECS=60

tmp=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

export AGENTWIRE_DATA_DIR="$tmp/data"
export AGENTWIRE_CONFIG="$tmp/agentwire.toml"
cat >"$AGENTWIRE_CONFIG" <<EOF
[serve]
relay_listen = "127.0.0.1:0"
[http]
listen = "127.0.0.1:0"
[roost]
socket = "$tmp/roost.sock"
EOF

fail() {
  echo "README quick start: $*" >&2
  echo "--- serve's stderr:" >&2
  cat "$tmp/serve.err" >&2 2>/dev/null || true
  exit 1
}

# The build first, on its own, so that the ready line's wait below does not include it.
echo "building the release binary (cargo run --release -- --version)"
version=$(cargo run --release -- --version) || fail "\`cargo run --release -- --version\` failed"
echo "$version"
case "$version" in agentwire*) ;; *) fail "\`cargo run --release -- --version\` printed: $version" ;; esac

# Terminal 1.
cargo run --release -- serve >"$tmp/serve.out" 2>"$tmp/serve.err" &
pid=$!
# Cargo builds again first if a source changed since the build above (a developer's tree): the ready line's
# bound counts from when it runs the binary.
until grep -q 'Running `' "$tmp/serve.err" 2>/dev/null; do
  kill -0 "$pid" 2>/dev/null || fail "\`cargo run --release -- serve\` did not start the daemon"
  sleep 0.2
done
for _ in $(seq 1 $((READY_WITHIN_SECS * 10))); do
  grep -q '"ready":true' "$tmp/serve.out" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || fail "\`cargo run --release -- serve\` exited before its ready line"
  sleep 0.1
done
grep -q '"ready":true' "$tmp/serve.out" || fail "no ready line within ${READY_WITHIN_SECS}s"
echo "serve is ready: $(head -c 160 "$tmp/serve.out")…"

# Terminal 2.
answer=$(cargo run --release -- ask "hello" 2>"$tmp/ask.err") || fail "ask failed: $(cat "$tmp/ask.err")"
[ "$answer" = "You said: hello" ] || fail "\`ask \"hello\"\` printed: $answer"
echo "ask \"hello\": $answer"
answer=$(cargo run --release -- ask "calc (1 + 2) * 28" 2>"$tmp/ask.err") || fail "ask calc failed: $(cat "$tmp/ask.err")"
[ "$answer" = "84" ] || fail "\`ask \"calc (1 + 2) * 28\"\` printed: $answer"
grep -q '\[tool calculator start' "$tmp/ask.err" || fail "no calculator activity on stderr: $(cat "$tmp/ask.err")"
echo "ask \"calc (1 + 2) * 28\": $answer"
info=$(cargo run --release -- info 2>"$tmp/info.err") || fail "info failed: $(cat "$tmp/info.err")"
case "$info" in *'"tool_names"'*) ;; *) fail "\`info\` printed: $info" ;; esac
echo "info: the agent's ai.info"

# The OpenAI API line of "Programs: the OpenAI API", as written but for its address and data dir, which are
# this run's (the defaults may be taken on a shared machine).
http=$(sed -n 's/.*"http":"\(http:[^"]*\)".*/\1/p' "$tmp/serve.out")
[ -n "$http" ] || fail "the ready line names no HTTP server"
line=$(sed -n '/^### Programs: the OpenAI API/,/^### /p' README.md | grep '^curl ' | head -n 1)
[ -n "$line" ] || fail "no curl line under \"### Programs: the OpenAI API\" in the README"
line=${line//http:\/\/127.0.0.1:7780/$http}
line=${line//\~\/.local\/share\/agentwire/$AGENTWIRE_DATA_DIR}
completion=$(bash -c "$line") || fail "the README's curl line failed: $completion"
case "$completion" in *'"content":"84"'*) ;; *) fail "the README's curl line printed: $completion" ;; esac
echo "the README's OpenAI API line: 84"
echo "the README's quick start works as written"
