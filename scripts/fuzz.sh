#!/usr/bin/env bash
# Runs every fuzz target of agentwire's decoders (fuzz/fuzz_targets) for a bounded time each, on the nightly
# toolchain with cargo-fuzz (installed with `cargo install` when missing).
#
#   ./scripts/fuzz.sh              # each target for 10 s (what scripts/test.sh runs)
#   ./scripts/fuzz.sh 600          # each target for 10 minutes (the longer run docs/testing.md describes)
#   ./scripts/fuzz.sh 60 nip44     # one target
#   ./scripts/fuzz.sh --build-only # build the targets and stop (scripts/test.sh does it beside the interop tests)
#
# Each target starts from its seeds (fuzz/seeds/<target>, the tests' inputs) and the corpus it grew before
# (target/fuzz-corpus/<target>); the NIP-44 target also from the official vectors' payloads when the
# conformance data is present. A crash stops the run, leaves its input in fuzz/artifacts/<target>/, and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build_only=false
if [ "${1:-}" = --build-only ]; then build_only=true; shift; fi
seconds=${1:-10}
shift || true

if ! rustup toolchain list | grep -q '^nightly'; then
  echo "the fuzz targets need the nightly toolchain (rustup toolchain install nightly)"; exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz (cargo install, into cargo's own bin directory) =="
  cargo install --quiet cargo-fuzz --version =0.13.2 --locked
fi

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cd fuzz/fuzz_targets && ls ./*.rs | sed 's|^\./||; s|\.rs$||')
fi

# Built once for all targets: unoptimised (it builds in a third of the time, and a bounded run is about
# reaching the decoders' branches, not speed) and without a sanitizer (the decoders are safe Rust: the
# fuzzers look for panics and broken round trips).
(cd fuzz && cargo +nightly fuzz build --dev --sanitizer none)
if $build_only; then exit 0; fi

conformance="${AGENTWIRE_CONFORMANCE_DIR:-}"
if [ -z "$conformance" ] && [ -d "$root/../shared/conformance" ]; then
  conformance="$root/../shared/conformance"
fi

for t in "${targets[@]}"; do
  corpus="$root/target/fuzz-corpus/$t"
  mkdir -p "$corpus"
  if [ "$t" = nip44 ] && [ -n "$conformance" ] && [ -f "$conformance/nip44/nip44.vectors.json" ]; then
    python3 - "$conformance/nip44/nip44.vectors.json" "$corpus" <<'PY'
import json, sys, hashlib, os
v = json.load(open(sys.argv[1]))["v2"]
payloads = [c["payload"] for c in v["valid"]["encrypt_decrypt"]] + [c["payload"] for c in v["invalid"]["decrypt"]]
for p in payloads:
    open(os.path.join(sys.argv[2], "vector-" + hashlib.sha1(p.encode()).hexdigest()), "w").write(p)
PY
  fi
  echo "== fuzz $t: ${seconds} s =="
  log="$root/target/fuzz-$t.log"
  set +e
  (cd fuzz && cargo +nightly fuzz run --dev --sanitizer none "$t" "$corpus" "seeds/$t" -- \
    -max_total_time="$seconds" -max_len=65536 -print_final_stats=1) >"$log" 2>&1
  status=$?
  set -e
  grep -E '^(stat::number_of_executed_units|stat::new_units_added|Done)' "$log" || true
  if [ "$status" -ne 0 ]; then
    tail -40 "$log"
    echo "fuzz target $t failed (exit $status); its input is in fuzz/artifacts/$t/, the whole log in $log"
    exit 1
  fi
done
