#!/usr/bin/env bash
# Engine and verbs checks beyond `cargo test --workspace` (which already runs the in-memory
# suites, the hostile-peer tests, the DPDK net_ring suite in one process and the net_memif
# suite between two processes, each capture judged by iwdump and tshark):
#
#   the security matrix (verbs/tests/security_matrix.rs), rerun with --nocapture so its
#   one line per case (Terminate, QP states, local reports, untouched memory) shows here;
#   the memif_hello example, server and client as two processes over net_memif
#   (--no-huge --no-pci), must print the Send, the RDMA Write, the RDMA Read, the Write
#   with Immediate and the FetchAdd.
#
# `ENGINE_RELEASE=1` also reruns the engine and verbs suites in release mode (a few minutes
# of extra build on 2 cores).
#
# Every step is bounded in time; names carry the process id (memif socket in a private temp
# directory, --file-prefix=wceng-ex-*). Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

if [[ "${ENGINE_RELEASE:-0}" == 1 ]]; then
    step "engine + verbs suites (release, tshark required)"
    WARPCORE_REQUIRE_TSHARK=1 timeout 900 cargo test --release -p warpcore-engine -p warpcore-verbs
fi

step "security matrix (one line per case)"
matrix=$(mktemp /tmp/wceng-matrix.XXXXXX)
# --workspace (only warpcore-verbs has the target): the features the cargo test step resolved,
# so nothing but the test is built; -p warpcore-verbs built 13 crates again (25 s on 2 cores).
if ! timeout 600 cargo test --workspace --test security_matrix -- --nocapture \
    --test-threads=2 >"$matrix" 2>&1; then
    cat "$matrix"; rm -f "$matrix"; exit 1
fi
grep '^security:' "$matrix" | sort
lines=$(grep -c '^security:' "$matrix" || true)
rm -f "$matrix"
if (( lines < 19 )); then
    echo "security matrix: only $lines case lines"; exit 1
fi

step "memif_hello example: two processes over net_memif"
# --workspace: the example the cargo test step built (-p warpcore-apps built 8 crates again).
timeout 600 cargo build --workspace --example memif_hello
dir=$(mktemp -d /tmp/wceng-example.XXXXXX)
trap 'rm -rf "$dir"' EXIT
export WCENG_SOCK="$dir/memif.sock"
case ${CARGO_TARGET_DIR:-target} in /*) tgt=$CARGO_TARGET_DIR ;; *) tgt=$(pwd)/${CARGO_TARGET_DIR:-target} ;; esac
ex=$tgt/debug/examples/memif_hello
timeout 90 "$ex" server >"$dir/server.log" 2>&1 &
server=$!
# A memif client started before the server's socket exists fails at once (DPDK 22.11's
# net_memif connects once, at port start): wait for the socket, not for a fixed time.
for _ in $(seq 1 200); do [[ -S "$WCENG_SOCK" ]] && break; sleep 0.05; done
if [[ ! -S "$WCENG_SOCK" ]]; then
    echo "the memif_hello server made no socket in 10 s:"; cat "$dir/server.log"; kill "$server" 2>/dev/null || true; exit 1
fi
if ! timeout 90 "$ex" client >"$dir/client.log" 2>&1; then
    echo "client failed:"; cat "$dir/client.log"; kill "$server" 2>/dev/null || true; exit 1
fi
if ! wait "$server"; then
    echo "server failed:"; cat "$dir/server.log"; exit 1
fi
cat "$dir/server.log" "$dir/client.log"
grep -q 'server: Send arrived: "hello from the client"' "$dir/server.log"
grep -q 'server: RDMA Write arrived: "written by RDMA Write"' "$dir/server.log"
grep -q 'client: RDMA Read returned: "greetings from the server"' "$dir/client.log"
grep -q 'server: Write with Immediate arrived: "written with an immediate", immediate 0xc0ffee (RecvImm)' "$dir/server.log"
grep -q 'server: counter after the FetchAdd: 42' "$dir/server.log"
grep -q 'client: FetchAdd returned the counter.s old value 41' "$dir/client.log"

step "engine tests passed"
