#!/usr/bin/env bash
# Run every test of the workspace on a fresh machine: installs what the tests
# need (Python's kubernetes client, openssl, curl, make, promtool, containerd
# and what container nodes run), checks the kubectl binaries the tests
# drive, checks formatting, lints and docs, then builds and runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."

need() { command -v "$1" >/dev/null 2>&1 || { echo "test-all: '$1' is required but not installed: $2" >&2; exit 1; }; }
need cargo "install Rust (rustup) first"
need kubectl "the tests drive the real kubectl; install it (kubectl 1.27-1.33 beside it as kubectl.1.XX)"
need python3 "the Python client tests need python3"
cargo fmt --version >/dev/null 2>&1 || { echo "test-all: rustfmt is required: rustup component add rustfmt" >&2; exit 1; }
cargo clippy --version >/dev/null 2>&1 || { echo "test-all: clippy is required: rustup component add clippy" >&2; exit 1; }

# openssl makes the multi-valued certificate subjects the x509 tests need;
# curl plays the unauthenticated client; make runs a scaffolded project's
# Makefile (crates/cli/tests/scaffold.rs).
missing=()
for tool in openssl curl make; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "test-all: installing ${missing[*]} (Debian packages)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
# promtool (Debian's prometheus package) lints what /metrics serves.
if ! command -v promtool >/dev/null 2>&1; then
  echo "test-all: installing prometheus (promtool; Debian package)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus
fi

# Container nodes (crates/node): containerd with runc, the reference CNI
# plugins, the distribution registry, busybox and memcached to build images
# from, nft for the egress guard; protoc builds the CRI protocol (k8s-cri).
node_missing=()
for pair in containerd:containerd runc:runc docker-registry:docker-registry \
    busybox:busybox-static memcached:memcached protoc:protobuf-compiler nft:nftables; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || [ -x "/usr/sbin/${pair%%:*}" ] || node_missing+=("${pair#*:}")
done
[ -x /usr/lib/cni/bridge ] || node_missing+=(containernetworking-plugins)
if [ "${#node_missing[@]}" -gt 0 ]; then
  echo "test-all: installing ${node_missing[*]} (Debian packages, for container nodes)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${node_missing[@]}"
fi

if ! python3 -c 'import kubernetes' 2>/dev/null; then
  echo "test-all: installing the Python kubernetes client"
  python3 -m pip install --quiet --disable-pip-version-check 'kubernetes==33.1.0'
fi

export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
# A one-shot build gains nothing from incremental state; it was a third of
# the target directory (several GiB) of a cold run.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
# The project's habits, enforced: formatting, lints as errors, and rustdoc
# warnings (broken links, missing docs on public items) as errors.
echo "test-all: cargo fmt --check"
cargo fmt --all --check
echo "test-all: cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "test-all: cargo doc -D warnings"
RUSTDOCFLAGS="${RUSTDOCFLAGS:-} -D warnings" cargo doc --workspace --no-deps --locked
cargo build --workspace --all-targets --locked
cargo test --workspace --locked -- --test-threads="${TEST_THREADS:-4}"

# Fuzz smoke: replay every committed fuzz corpus and fuzz each target for a
# few seconds (fuzz/, cargo-fuzz; see docs/guide/fuzzing.md).
bash scripts/fuzz-smoke.sh
