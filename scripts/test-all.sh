#!/usr/bin/env bash
# Run every test of the workspace on a fresh machine: checks every tool the
# tests use and installs what Debian packages (openssl, curl, make, promtool,
# ip, ps, a C++ compiler, a static busybox, containerd and what container
# nodes run), checks the kubectl binaries the tests drive, puts Python's
# kubernetes client in a virtual environment (target/test-venv), checks
# formatting, lints and docs, removes what dead kubeforge runs left
# (`kubeforge clean --all`), then runs each test binary under a time limit
# (TEST_BINARY_TIMEOUT seconds, default 1200) with --test-threads=TEST_THREADS
# (default 4), the doctests, and the fuzz smoke.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "test-all: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "'$1' is required but not installed: $2"; }
need cargo "install Rust (rustup) first"
need timeout "install coreutils"
cargo fmt --version >/dev/null 2>&1 || die "rustfmt is required: rustup component add rustfmt"
cargo clippy --version >/dev/null 2>&1 || die "clippy is required: rustup component add clippy"

# --- Preflight: every tool the tests use, before any build. ---------------

# kubectl and kubectl 1.27-1.33 beside the real file (the version-skew tests,
# crates/cli/tests/common/mod.rs); Debian packages none of them.
need kubectl "the tests drive the real kubectl; install it (and kubectl 1.27-1.33 beside it as kubectl.1.XX)"
kubectl_dir=$(dirname "$(readlink -f "$(command -v kubectl)")")
missing_kubectl=()
for minor in 27 28 29 30 31 32 33; do
  [ -x "$kubectl_dir/kubectl.1.$minor" ] || missing_kubectl+=("kubectl.1.$minor")
done
if [ "${#missing_kubectl[@]}" -gt 0 ]; then
  die "missing ${missing_kubectl[*]} in $kubectl_dir: the tests need kubectl 1.27-1.33 beside the real kubectl ($kubectl_dir/kubectl); install each release's kubectl there under that name (Debian has no package for them)"
fi

# Tools found on PATH (or in /usr/sbin, which root's PATH may lack), with the
# Debian package that has each. The Python client tests run python3; openssl
# makes the multi-valued certificate subjects the x509 tests need; curl plays
# the unauthenticated client; make runs a scaffolded project's Makefile
# (crates/cli/tests/scaffold.rs); ip, ps, pgrep, kill and ldd inspect what
# container nodes start; setpriv gives the CLI tests' `up` a parent-death
# signal; a C++ compiler builds libFuzzer (scripts/fuzz-smoke.sh).
tools=(python3:python3 openssl:openssl curl:curl make:make ip:iproute2 ps:procps pgrep:procps
  kill:procps ldd:libc-bin setpriv:util-linux c++:g++)
# promtool (Debian's prometheus package) lints what /metrics serves.
# Container nodes (crates/node): containerd with runc, the distribution
# registry, memcached to build an image from, nft for the egress guard,
# iptables for the portmap plugin (hostPort), ping and dig to query pods and
# the cluster DNS server; protoc builds the CRI protocol (k8s-cri).
lean_tools=(promtool:prometheus containerd:containerd runc:runc docker-registry:docker-registry
  memcached:memcached protoc:protobuf-compiler nft:nftables ping:iputils-ping
  iptables:iptables dig:bind9-dnsutils)
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }
# Images are built from a static busybox at /bin/busybox (Debian's
# busybox-static; the dynamic busybox package would not run in an image).
# (ldd fails on it, saying so: no pipe into grep under pipefail.)
static_busybox() { [ -x /bin/busybox ] && [[ "$(ldd /bin/busybox 2>&1)" == *"not a dynamic executable"* ]]; }
# Python packages go into a virtual environment (below), which Debian's
# python3 can make only with python3-venv.
target_dir=${CARGO_TARGET_DIR:-target}
venv=$(realpath -m "$target_dir/test-venv")
can_make_venv() {
  "$venv/bin/python3" -c '' 2>/dev/null && return 0
  local py
  py=$(readlink -f "$(command -v python3)" 2>/dev/null) || return 1
  case "$py" in
    /usr/bin/*) [[ "$(dpkg-query -W -f='${Status}' python3-venv 2>/dev/null)" == "install ok installed" ]] ;;
    *) "$py" -c 'import venv, ensurepip' >/dev/null 2>&1 ;;
  esac
}
# The reference CNI plugins; Debian's Python client goes into the in-cluster
# test's python image (its own /usr/bin/python3, not the virtual environment).
have_path() {
  case "$1" in
    cni) [ -x /usr/lib/cni/bridge ] ;;
    busybox) static_busybox ;;
    python3-kubernetes) [ -d /usr/lib/python3/dist-packages/kubernetes ] ;;
    venv) can_make_venv ;;
  esac
}
paths=(cni:containernetworking-plugins busybox:busybox-static
  python3-kubernetes:python3-kubernetes venv:python3-venv)

missing_packages() { # $1: tools (1) or lean (2)
  local pair
  if [ "$1" = 1 ]; then
    for pair in "${tools[@]}"; do have "${pair%%:*}" || echo "${pair#*:}"; done
  else
    for pair in "${lean_tools[@]}"; do have "${pair%%:*}" || echo "${pair#*:}"; done
    for pair in "${paths[@]}"; do have_path "${pair%%:*}" || echo "${pair#*:}"; done
  fi | sort -u
}
mapfile -t plain < <(missing_packages 1)
mapfile -t lean < <(missing_packages 2)
all=("${plain[@]}" "${lean[@]}")
if [ "${#all[@]}" -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 ||
    die "install ${all[*]} (Debian package names): apt-get is not available here"
  [ "$(id -u)" = 0 ] || die "install ${all[*]} (Debian packages), or run this script as root"
  echo "test-all: installing ${all[*]} (Debian packages)"
  # A dpkg interrupted earlier (half-configured packages) makes apt refuse.
  dpkg --configure -a
  apt-get update -qq
  if [ "${#plain[@]}" -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${plain[@]}"
  fi
  if [ "${#lean[@]}" -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${lean[@]}"
  fi
  mapfile -t still < <({ missing_packages 1; missing_packages 2; } | sort -u)
  [ "${#still[@]}" -eq 0 ] || die "still missing after apt-get: install ${still[*]} (Debian packages)"
fi

# Python's kubernetes client in a virtual environment, not the system
# interpreter; its bin goes first on PATH, so the tests' `python3` is its.
if ! "$venv/bin/python3" -c '' 2>/dev/null; then
  echo "test-all: creating the Python virtual environment $venv"
  rm -rf "$venv"
  python3 -m venv "$venv" || die "python3 -m venv failed: install python3-venv (Debian) or a python3 whose venv module works"
fi
if ! "$venv/bin/python3" -c 'import sys, kubernetes; sys.exit(kubernetes.__version__ != "33.1.0")' 2>/dev/null; then
  echo "test-all: installing the Python kubernetes client into $venv"
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check 'kubernetes==33.1.0'
fi
export VIRTUAL_ENV="$venv"
export PATH="$venv/bin:$PATH"
[ "$(command -v python3)" = "$venv/bin/python3" ] || die "python3 on PATH is not $venv/bin/python3"

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

# What dead kubeforge runs left (containerd, shims, bridges, mounts of a run
# that was killed) would fail tests that have nothing to do with it: remove
# it. `clean --all` never touches a live run.
kubeforge_bin="$target_dir/debug/kubeforge"
[ -x "$kubeforge_bin" ] || die "$kubeforge_bin was not built (cargo build --workspace should have built it)"
"$kubeforge_bin" clean --help >/dev/null 2>&1 ||
  die "$kubeforge_bin has no 'clean' subcommand: this script needs 'kubeforge clean --all' to remove what earlier runs left"
echo "test-all: kubeforge clean --all"
# The tests judge only what they start, so what cannot be removed (named
# above) is reported, not fatal.
"$kubeforge_bin" clean --all ||
  echo "test-all: warning: 'kubeforge clean --all' could not remove everything earlier kubeforge runs left (see above)" >&2

# Build the test binaries and list them (as `cargo test --workspace` would
# run them: one per package's lib/bin unit tests, tests/*.rs, and examples
# with test = true), with the package each belongs to.
echo "test-all: building the test binaries"
build_json="$target_dir/test-binaries.json"
if ! cargo test --workspace --locked --no-run --message-format=json >"$build_json"; then
  # The compiler's messages went into the JSON: show them.
  python3 -c 'import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line) if line.startswith("{") else {}
    if m.get("reason") == "compiler-message":
        print(m["message"].get("rendered") or "", end="", file=sys.stderr)' "$build_json" || true
  die "building the test binaries failed (above)"
fi
cargo metadata --format-version 1 --no-deps --locked >"$target_dir/test-metadata.json"
# Lines: executable<TAB>package directory<TAB>package name<TAB>version<TAB>label.
mapfile -t binaries < <(python3 - "$build_json" "$target_dir/test-metadata.json" <<'EOF'
import json, os, sys
packages = {p["id"]: p for p in json.load(open(sys.argv[2]))["packages"]}
rank = {"lib": 0, "rlib": 0, "proc-macro": 0, "bin": 1, "test": 2, "example": 3, "bench": 4}
seen, rows = set(), []
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("profile", {}).get("test"):
        continue
    exe = m.get("executable")
    if not exe or exe in seen:
        continue
    seen.add(exe)
    p = packages[m["package_id"]]
    d = os.path.dirname(p["manifest_path"])
    t = m["target"]
    kind = t["kind"][0]
    src = os.path.relpath(t["src_path"], d)
    label = f"unittests {src}" if kind in ("lib", "rlib", "proc-macro", "bin") else src
    rows.append(((p["name"], rank.get(kind, 9), t["name"]), [exe, d, p["name"], p["version"], label]))
for _, row in sorted(rows):
    print("\t".join(row))
EOF
)
[ "${#binaries[@]}" -gt 0 ] || die "found no test binaries in cargo's output ($build_json)"
# Cross-check against cargo's own list (one "Executable" line per binary
# `cargo test` runs; nothing is rebuilt).
listed=$(cargo test --workspace --locked --no-run 2>&1 | grep -c '^ *Executable ' || true)
[ "$listed" = "${#binaries[@]}" ] ||
  die "cargo test --no-run lists $listed test binaries but its JSON gave ${#binaries[@]} ($build_json): fix the parsing above"
echo "test-all: ${#binaries[@]} test binaries (as cargo test --workspace runs them)"

# Each binary as cargo test runs it (from its package's directory, with
# cargo's variables), stopped after the time limit; the first failure stops
# the run. libtest names a test that runs for over 60 s ("has been running
# for over 60 seconds").
# The limit guards against a hang, not a speed target: on a cold machine
# tests/scaffold.rs compiles a whole generated project (kube, tokio, ...)
# into its own target directory, more than 6 minutes on 2 cores.
limit=${TEST_BINARY_TIMEOUT:-1200}
threads=${TEST_THREADS:-4}
cargo_path=$(rustup which cargo 2>/dev/null || command -v cargo)
interrupted=0
running=
# Ctrl-C: `timeout` runs its command in its own process group, which the
# terminal's signal does not reach; stop it (and its command's group).
trap 'interrupted=1; if [ -n "$running" ]; then kill -TERM "$running" 2>/dev/null || true; else exit 130; fi' INT TERM
n=0
for row in "${binaries[@]}"; do
  IFS=$'\t' read -r exe dir pkg version label <<<"$row"
  n=$((n + 1))
  name="$pkg: $label (${exe#"$PWD"/})"
  echo "test-all: [$n/${#binaries[@]}] $name"
  (cd "$dir" && exec env CARGO="$cargo_path" CARGO_MANIFEST_DIR="$dir" \
    CARGO_MANIFEST_PATH="$dir/Cargo.toml" CARGO_PKG_NAME="$pkg" CARGO_PKG_VERSION="$version" \
    timeout --kill-after=15 "$limit" "$exe" --test-threads="$threads") &
  running=$!
  rc=0
  wait "$running" || rc=$?
  # A trapped signal interrupts `wait`: wait again for the binary to end.
  while [ "$interrupted" = 1 ] && kill -0 "$running" 2>/dev/null; do
    wait "$running" || rc=$?
  done
  running=
  [ "$interrupted" = 0 ] || die "interrupted while running $name"
  case $rc in
    0) ;;
    124) die "$name did not finish within $limit s and was stopped (the tests libtest reported running for over 60 seconds, above, are the ones that hung)" ;;
    137) die "$name was killed (SIGKILL): it ignored SIGTERM at the time limit of $limit s, or the kernel killed it (out of memory?)" ;;
    *) die "$name failed (exit status $rc)" ;;
  esac
done
trap - INT TERM
echo "test-all: all ${#binaries[@]} test binaries passed"
echo "test-all: doctests"
cargo test --workspace --locked --doc -- --test-threads="$threads"

# Fuzz smoke: replay every committed fuzz corpus and fuzz each target for a
# few seconds (fuzz/, cargo-fuzz; see docs/guide/fuzzing.md).
bash scripts/fuzz-smoke.sh
