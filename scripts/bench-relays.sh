#!/usr/bin/env bash
# The embedded relay beside nostr-rs-relay 0.8.12 on this machine, in one run (docs/benchmarks.md).
# Installs what it needs: Debian's protobuf-compiler (nostr-rs-relay's build needs protoc) and
# nostr-rs-relay itself, under target/tools/nostr-rs-relay; then builds agentwire in release and runs
# relay-bench. Extra arguments go to relay-bench (e.g. --repeat 1).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if ! command -v protoc >/dev/null 2>&1; then
  echo "installing protobuf-compiler (Debian) for nostr-rs-relay's build"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler
fi
nrr="$root/target/tools/nostr-rs-relay/bin/nostr-rs-relay"
if [ ! -x "$nrr" ]; then
  echo "installing nostr-rs-relay 0.8.12 (crates.io) under target/tools/nostr-rs-relay"
  # Not --locked: its lockfile pins time 0.3.25, which today's Rust no longer compiles (type inference
  # changed); the newest semver-compatible dependencies build.
  CARGO_TARGET_DIR="$root/target/tools/nostr-rs-relay-build" \
    cargo install nostr-rs-relay --version 0.8.12 --root "$root/target/tools/nostr-rs-relay"
fi
cargo build --release --locked -p agentwire -p agentwire-bench
"$root/target/release/relay-bench" --agentwire "$root/target/release/agentwire" --nostr-rs-relay "$nrr" "$@"
