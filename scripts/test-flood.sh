#!/usr/bin/env bash
# Floods and slow peers (issue 15): an `iwping -s` on net_af_packet, a kernel client that
# opens 2,000 TCP connections to it (half silent, half sending ten octets of the MPA key,
# and then nothing), and, while those are held open, a legitimate `iwping -c` (net_af_packet)
# that must complete its pings; then, after the MPA startup timeout (10 s), every flood
# connection must have been reset by the server. All inside one private network namespace:
# a bridge joins the kernel (198.18.0.1), the server's veth (198.18.0.2) and the client's
# veth (198.18.0.3); the server must then exit 0 (it serves one client) within 20 s,
# reporting the pings. Needs root; prints one PASS/FAIL line and exits non-zero on failure.
#
#   scripts/test-flood.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
[[ $(id -u) -eq 0 ]] || { echo "test-flood: FAIL: needs root (namespaces, veths)"; exit 1; }
# IWPING=path runs another build (e.g. an older one, to see this test fail on it).
if [[ -z "${IWPING:-}" ]]; then
    scripts/build.sh # every binary the scripts run, iwping among them
fi
iwping=${IWPING:-${CARGO_TARGET_DIR:-$root/target}/release/iwping}

id=$$
ns=wcnet-fl$id
work=$(mktemp -d "/tmp/wcflood-$id.XXXX")
pids=()
cleanup() {
    bg_kill_all
    wait 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "test-flood: FAIL: $*"; for f in "$work"/*.log; do echo "--- $f"; grep -v '^EAL' "$f" | tail -n 15; done; exit 1; }
# shellcheck source=scripts/lib/bg-end.sh
source scripts/lib/bg-end.sh
# server_end PID LOG SECONDS: the server serves one client and exits; it must exit 0 within
# SECONDS of its client's end (bg_end), having reported the client's pings. A server that
# crashed, failed or hung once its client was done would otherwise go unnoticed (cleanup
# kills it).
server_end() {
    local rc=0
    bg_end "$1" "the iwping -s server" "$3" || rc=$?
    # Ended either way: its pid is free for reuse, and not the EXIT trap's to kill.
    bg_forget "$1"
    ((rc == 0)) || fail "$BG_NOTE"
    grep -q "^iwping: server: 3 pings done" "$2" || fail "the iwping -s server did not report its 3 pings"
}

scripts/netns.sh create "$ns"
vdev=$(scripts/netns.sh veth "$ns" 198.18.0.1/24)
kside=${ns:0:12}-k
# The kernel's address moves to a bridge that also takes the client's veth.
ip -n "$ns" addr del 198.18.0.1/24 dev "$kside"
ip -n "$ns" link add wcbr0 type bridge
ip -n "$ns" link set "$kside" master wcbr0
ip -n "$ns" addr add 198.18.0.1/24 dev wcbr0
ip -n "$ns" link set wcbr0 up
eal="--no-huge -m 256 --no-pci --no-telemetry --no-shconf --log-level=error"
# shellcheck source=scripts/lib/cpus.sh
source scripts/lib/cpus.sh
cpus_pick

# The server: one legitimate client to serve (iwping -s serves one connection).
ip netns exec "$ns" timeout 120 "$iwping" -s -a 198.18.0.2 -p 7471 --ip 198.18.0.2/24 \
    --vdev "net_af_packet0,iface=$vdev" --eal="-l $CPU_A $eal --file-prefix=wcfl-s$id" \
    --timeout 60 >"$work/server.log" 2>&1 &
server=$!
pids+=("$server")

# The flood: 2,000 connections from the kernel, held open, then checked after the timeout.
cat >"$work/flood.py" <<'PY'
import errno, resource, select, socket, sys, time
resource.setrlimit(resource.RLIMIT_NOFILE, (8192, 8192))
target, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
key = b"MPA ID Req Frame"[:10]
socks, established = [], 0
start = time.time()
for i in range(n):
    s = socket.socket()
    s.setblocking(False)
    try:
        s.connect((target, port))
    except BlockingIOError:
        pass
    socks.append((s, i % 2 == 1))
    if i % 50 == 49:
        time.sleep(0.02)
# Wait for the handshakes; send the partial key on half of them.
deadline = time.time() + 10
pending = {s for s, _ in socks}
while pending and time.time() < deadline:
    p = select.poll()
    byfd = {s.fileno(): s for s in pending}
    for fd in byfd:
        p.register(fd, select.POLLOUT)
    for fd, _ in p.poll(500):
        pending.discard(byfd[fd])
live = []
for s, talk in socks:
    if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0 and s not in pending:
        try:
            s.getpeername()
        except OSError:
            continue
        established += 1
        if talk:
            try:
                s.send(key)
            except OSError:
                pass
        live.append(s)
print(f"flood: {n} connections tried, {established} established in {time.time() - start:.1f} s", flush=True)
if established == 0:
    # Nothing to hold: "0 of 0 still open" would pass without testing the timeout.
    print("flood: no connection was established: the listener was not flooded", flush=True)
    sys.exit(2)
open(sys.argv[4], "w").write("ready\n")
# Hold them until told to check (the legitimate client runs meanwhile).
while not open(sys.argv[4]).read().startswith("check"):
    time.sleep(0.2)
still = 0
for s in live:
    try:
        s.setblocking(False)
        d = s.recv(1)
        if d:
            still += 1   # the server said something: not reset
    except BlockingIOError:
        still += 1       # still open, nothing from the server
    except OSError:
        pass             # reset
print(f"flood: {still} of {established} established connections still open after the timeout", flush=True)
sys.exit(1 if still else 0)
PY
# flood_held NAME: the wave flood_wave NAME started still runs, i.e. still holds its
# connections (it holds them until told to check). A wave that ended early (flood.py failed,
# or the server reset its connections at once) would leave the legitimate client an idle
# listener, and the test would pass without a flood.
flood_held() {
    local pid=${!1} rc=0
    if ! kill -0 "$pid" 2>/dev/null; then
        wait "$pid" || rc=$?
        fail "flood $1 had ended (exit $rc) before the legitimate client was done: the client ran without a flood"
    fi
}
flood_wave() { # flood_wave NAME: starts a wave of FLOOD_N connections, waits until held
    echo start >"$work/$1.state"
    ip netns exec "$ns" python3 "$work/flood.py" 198.18.0.2 7471 "${FLOOD_N:-2000}" \
        "$work/$1.state" >"$work/$1.log" 2>&1 &
    pids+=($!)
    eval "$1=$!"
    for _ in $(seq 1 300); do grep -q ready "$work/$1.state" && break; sleep 0.1; done
    grep -q ready "$work/$1.state" || fail "flood $1 did not get going"
    sed "s/^flood:/flood $1:/" "$work/$1.log"
}

# Wave 1: held past the MPA startup timeout (10 s): every one of its connections that got
# through must have been reset by then.
flood_wave wave1
sleep 12
echo check >"$work/wave1.state"
wave1_rc=0
wait "$wave1" || wave1_rc=$?
bg_forget "$wave1" # reaped: its pid is free for reuse
((wave1_rc == 0)) || { sed "s/^flood:/flood wave1:/" "$work/wave1.log"; fail "flood connections outlived the startup timeout"; }
reset_line=$(tail -n 1 "$work/wave1.log" | sed 's/^flood: //')

# Wave 2: held while the legitimate client connects and pings, over a second veth on the
# same bridge (net_af_packet on both ends: with offloads off every frame carries real
# checksums, which a bridge forwards as they are; a net_tap client would hand the bridge
# frames whose checksums are left to an offload).
flood_wave wave2
ip -n "$ns" link add wcflc-k type veth peer name wcflc-d
ip -n "$ns" link set wcflc-k master wcbr0
for dev in wcflc-k wcflc-d; do
    ip netns exec "$ns" ethtool -K "$dev" tx off tso off gso off gro off >/dev/null 2>&1
    ip -n "$ns" link set "$dev" up
done
t0=$(date +%s.%N)
ip netns exec "$ns" timeout 60 "$iwping" -c -a 198.18.0.2 -p 7471 -C 3 --ip 198.18.0.3/24 \
    --vdev "net_af_packet1,iface=wcflc-d" --eal="-l $CPU_B $eal --file-prefix=wcfl-c$id" \
    --timeout 20 --retry 20 >"$work/client.log" 2>&1 || fail "the legitimate iwping -c did not complete under the flood"
t1=$(date +%s.%N)
took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
grep -q "pings done" "$work/client.log" || fail "iwping -c did not report its pings"
flood_held wave2
server_end "$server" "$work/server.log" 20
echo "test-flood: PASS: wave 1 ($reset_line); wave 2: iwping -c completed 3 pings in $took s (EAL start included) while ${FLOOD_N:-2000} more connections flooded the listener; the server exited 0"
