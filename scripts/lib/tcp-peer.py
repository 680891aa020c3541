# A kernel TCP peer for the interop test: sends N bytes of the tcpperf exchange pattern
# (big-endian 32-bit word counter XOR a per-direction salt), receives N bytes and checks them.
# The last line names the kernel's send MSS for the connection (TCP_MAXSEG: what both
# sides' MSS options and the path allow), so a caller can tell jumbo segments flowed.
#   tcp-peer.py server|client ADDR PORT BYTES [MSS]   MSS: the MSS option this side sends
import array, socket, sys, threading, time
CLIENT_SALT, SERVER_SALT = 0x5A5A0001, 0xA5A50002
def pattern(salt, n):
    a = array.array('I', (i ^ salt for i in range((n + 3) // 4)))
    if sys.byteorder == 'little':
        a.byteswap()
    return a.tobytes()[:n]
role, addr, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
adv_mss = int(sys.argv[5]) if len(sys.argv) > 5 else None
def new_socket():
    s = socket.socket()
    if adv_mss:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, adv_mss)
    return s
if role == 'server':
    ls = new_socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port)); ls.listen(1); ls.settimeout(60)
tx = pattern(CLIENT_SALT if role == 'client' else SERVER_SALT, n)
want = pattern(SERVER_SALT if role == 'client' else CLIENT_SALT, n)
if role == 'server':
    print('peer: listening', flush=True)
    s, _ = ls.accept()
else:
    deadline = time.time() + 30
    while True:
        try:
            s = new_socket()
            s.settimeout(5)
            s.connect((addr, port))
            break
        except OSError:
            s.close()
            if time.time() > deadline:
                raise
            time.sleep(0.2)
s.settimeout(60)
mss = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
def send():
    s.sendall(tx)
    s.shutdown(socket.SHUT_WR)
t = threading.Thread(target=send); t.start()
got = bytearray()
while True:
    b = s.recv(1 << 20)
    if not b:
        break
    got += b
t.join(); s.close()
if bytes(got) != want:
    bad = next((i for i in range(min(len(got), n)) if got[i] != want[i]), min(len(got), n))
    print(f'peer: MISMATCH: received {len(got)} of {n} bytes, first difference at {bad}', flush=True)
    sys.exit(1)
print(f'peer: ok, sent {n} and received {n} bytes byte-exact, MSS {mss}', flush=True)
