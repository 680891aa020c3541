#!/usr/bin/env python3
"""Writes the seed inputs of the cargo-fuzz corpora (fuzz/corpus/<target>/seed-*).

Seeds are real traffic where we have it: the Linux siw captures in the repository's
interop/pcaps (TCP streams reassembled by tshark's "follow"), plus the mpa-08
test vectors and streams framed with markers by an independent Python framer written here
(so the Rust deframer is seeded with marker streams that our own framer did not make).
The input layouts are those documented in fuzz/bodies.rs.

    python3 fuzz/make_seeds.py [PCAP_DIR]    # PCAP_DIR defaults to interop/pcaps
    python3 fuzz/make_seeds.py interop/pcaps --capture-only   # the `capture` seeds alone

Re-running it is idempotent (file names are content hashes). After adding seeds, run the
targets and `cargo fuzz cmin` as described in fuzz/README.md.
"""

import hashlib
import os
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))
PCAPS = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "interop", "pcaps")
MAX_STREAM = 6000  # keep seeds small: libFuzzer's max_len follows the largest seed

# --- CRC32c (Castagnoli, reflected), independent of the Rust crate -----------------------
_T = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    _T.append(c)


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = _T[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def write(target, data):
    d = os.path.join(ROOT, "corpus", target)
    os.makedirs(d, exist_ok=True)
    name = "seed-" + hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# --- An independent MPA framer (mpa-08 §4: length, ULPDU, pad, markers, CRC) -------------
def frame(ulpdus, markers, crc_on, offset=0):
    out = bytearray()
    pos = offset
    for u in ulpdus:
        body = struct.pack(">H", len(u)) + bytes(u)
        body += b"\0" * ((-len(body)) % 4)
        start = None
        fpdu = bytearray()

        def put(octets):
            nonlocal pos, start
            for b in octets:
                if markers and pos % 512 == 0:
                    ptr = 0 if start is None else (pos - start) & 0xFFFC
                    m = struct.pack(">HH", 0, ptr)
                    fpdu.extend(m)
                    pos = (pos + 4) % (1 << 64)
                if start is None:
                    start = pos
                fpdu.append(b)
                pos = (pos + 1) % (1 << 64)

        put(body)
        if markers and pos % 512 == 0:  # a marker right before the CRC is covered
            fpdu.extend(struct.pack(">HH", 0, (pos - start) & 0xFFFC))
            pos = (pos + 4) % (1 << 64)
        c = crc32c(fpdu) if crc_on else 0
        fpdu.extend(struct.pack("<I", c))
        pos = (pos + 4) % (1 << 64)
        out.extend(fpdu)
    return bytes(out)


# mpa-08 Figure 5 must come out of the Python framer exactly (validates it).
_V1 = bytes.fromhex(
    "00000000002a4143000000000000000000000001000000000000000000000000"
    "0000000000000000000000000000000052239983"
)
assert frame([_V1[6:48]], True, True) == _V1, "Python framer disagrees with mpa-08 Figure 5"


# --- Capture streams ---------------------------------------------------------------------
def streams(pcap):
    """Yields (client_to_server, server_to_client) byte strings per TCP stream."""
    ids = subprocess.run(
        ["tshark", "-r", pcap, "-T", "fields", "-e", "tcp.stream"],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    for sid in sorted(set(ids), key=int):
        out = subprocess.run(
            ["tshark", "-r", pcap, "-q", "-z", f"follow,tcp,raw,{sid}"],
            capture_output=True, text=True, check=True,
        ).stdout
        a, b = bytearray(), bytearray()
        for line in out.splitlines():
            if not line or line.startswith(("=", "Follow", "Filter", "Node")):
                continue
            if line.startswith("\t"):
                b.extend(bytes.fromhex(line.strip()))
            else:
                a.extend(bytes.fromhex(line.strip()))
        if a.startswith(b"MPA ID Req Frame") and b.startswith(b"MPA ID Rep Frame"):
            yield bytes(a), bytes(b)


def frame_len(s):
    return 20 + struct.unpack(">H", s[18:20])[0]


def fpdus(s):
    """ULPDUs and whole FPDUs of a marker-free FPDU stream."""
    at = 0
    while at + 2 <= len(s):
        n = struct.unpack(">H", s[at:at + 2])[0]
        total = (2 + n + 3) // 4 * 4 + 4
        if at + total > len(s):
            break
        yield s[at + 2:at + 2 + n], s[at:at + total]
        at += total


def main():
    seen_ops = set()
    for name in sorted(os.listdir(PCAPS)):
        if not name.endswith(".pcap"):
            continue
        crc = "mpa2crc" in name
        p2p = "p2p" in name
        rev1 = "mpa1" in name
        for n_stream, (req, rep) in enumerate(streams(os.path.join(PCAPS, name))):
            if n_stream > 1:
                break
            for direction, s in ((0, req), (1, rep)):
                body = s[frame_len(s):]
                # deframer: as negotiated, and CRC checking forced on (error paths).
                write("deframer", bytes([0x02 if crc else 0x00, 0x11]) + body[:MAX_STREAM])
                if not crc:
                    write("deframer", bytes([0x02, 0x2A]) + body[:600])
                # headers: the startup frame, FPDUs, DDP headers and ULPDUs.
                write("headers", bytes([0]) + s[:frame_len(s)])
                for ulpdu, whole in fpdus(body[:MAX_STREAM * 4]):
                    op = (len(ulpdu) > 1 and ulpdu[1] & 0x0F, crc, direction)
                    if op in seen_ops:
                        continue
                    seen_ops.add(op)
                    write("headers", bytes([1]) + whole[:2000])
                    write("headers", bytes([2]) + ulpdu[:64])
                    write("headers", bytes([8]) + ulpdu[:2000])
                    write("headers", bytes([9, 3, 0]) + ulpdu[:200])
                    if len(ulpdu) >= 46 and ulpdu[1] & 0x0F == 1:
                        write("headers", bytes([3]) + ulpdu[18:46])
                        write("headers", bytes([10]) + ulpdu)
                # negotiation: the machine that receives this stream.
                init_cfg = 0x01 | (0x02 if crc else 0) | 0x08 | (0x10 | 0xC0 if p2p else 0)
                if rev1:
                    init_cfg &= ~0x01
                resp_cfg = init_cfg | 0xE0
                decision = 0x80 if direction == 0 else 0x00
                write("negotiation",
                      bytes([init_cfg, resp_cfg, 0x55, decision, 0x33]) + s[:frame_len(s) + 400])
                # ddp_receive: the stream's ULPDUs against an engine that knows its STags.
                ulpdus = [u for u, _ in fpdus(body[:MAX_STREAM * 2])]
                stag, to = 0, 0
                for u in ulpdus:
                    if len(u) >= 14 and u[0] & 0x80:
                        stag, to = struct.unpack(">IQ", u[2:14])
                        break
                    if len(u) >= 46 and u[1] & 0x0F == 1:
                        stag, to = struct.unpack(">IQ", u[34:46])
                        break
                cfg = bytes([0xCF]) + struct.pack(">IQHH", stag, to & ~0xFFF, 0xFFFF, 0xFFFF)
                cfg += bytes([128])
                segs = b"".join(struct.pack(">H", len(u)) + u for u in ulpdus)
                write("ddp_receive", cfg + segs[:MAX_STREAM])

    # mpa-08 Figures 5 and 6 (markers and CRC), and streams from the Python framer.
    write("deframer", bytes([0x03, 0x05]) + _V1)
    send = lambda msn, n: bytes([0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0]) + struct.pack(">II", msn, 0) + bytes(n)
    for cfg, offset in ((0x03, 0), (0x07, 8), (0x0B, 508), (0x0F, (1 << 64) - 508), (0x01, 0)):
        ulpdus = [send(1, 24), send(2, 600), send(3, 0), send(4, 1100), send(5, 3)]
        write("deframer", bytes([cfg, 0x77]) + frame(ulpdus, cfg & 1, cfg & 2, offset))
        # framer mode: the same sizes as ULPDU records [n, 3n octets].
        recs = b"".join(bytes([min(len(u) // 3, 255)]) + u[: 3 * min(len(u) // 3, 255)]
                        for u in ulpdus)
        write("deframer", bytes([0x80 | cfg, 0x19]) + recs)
        # ... and with one damaged octet, CRC left stale (bit 5) or recomputed (bits 5+6).
        write("deframer", bytes([0xA0 | cfg, 0x23]) + recs)
        write("deframer", bytes([0xE0 | cfg, 0x47]) + recs)
    # headers: synthetic RFC 7306 and Terminate headers (siw sends none of them).
    write("headers", bytes([4]) + bytes.fromhex("1002c000002a") + send(7, 0)[:18])
    write("headers", bytes([4]) + bytes.fromhex("00012000") + bytes(28))
    write("headers", bytes([5]) + bytes(3) + b"\x02" + bytes(range(48)))
    write("headers", bytes([6]) + bytes(range(12)))
    write("headers", bytes([7]) + b"immedate")
    for rtr_hex in (
        "c1400000000100000000000000000000"[:28],
        "414300000000000000000000000100000000",
        "41410000000000000001000000010000000000000000000000000000000000000000000000000000000000000000",
    ):
        u = bytes.fromhex(rtr_hex)
        write("headers", bytes([10]) + u)
        write("headers", bytes([8]) + u)
    # negotiation: the Python view of a Reply for the default initiator.
    reply = b"MPA ID Rep Frame" + bytes([0x50, 2, 0, 4]) + bytes.fromhex("00100010")
    write("negotiation", bytes([0x0B, 0xEB, 0xAA, 0x00, 0x01]) + reply + frame([send(1, 4)], 0, 1))
    capture_seeds()


def pcap_records(data):
    """The frames of a classic pcap file (either byte order), as (octets, original length)."""
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        e = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        e = ">"
    else:
        return []
    at, out = 24, []
    while at + 16 <= len(data):
        _, _, incl, orig = struct.unpack(e + "IIII", data[at:at + 16])
        out.append((data[at + 16:at + 16 + incl], orig))
        at += 16 + incl
    return out


def capture_seeds():
    """Seeds of the `capture` target (layout in fuzz/capture_body.rs): small siw captures as
    files (mode 0) and the first frames of every capture as a framed list (mode 1), so that
    the fuzzer mutates both the containers and the TCP/MPA/DDP/RDMAP inside them."""
    for name in sorted(os.listdir(PCAPS)):
        path = os.path.join(PCAPS, name)
        data = open(path, "rb").read()
        if len(data) <= MAX_STREAM:
            write("capture", bytes([0]) + data)
        elif name.endswith(".pcapng"):
            # Cut short: the reader must give the frames before the cut and a warning.
            write("capture", bytes([0]) + data[:MAX_STREAM])
        if not name.endswith(".pcap"):
            continue
        framed = bytearray([1])
        for octets, _ in pcap_records(data):
            rec = struct.pack(">H", len(octets)) + octets
            if len(framed) + len(rec) > MAX_STREAM:
                break
            framed += rec
        if len(framed) > 1:
            write("capture", bytes(framed))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[2] == "--capture-only":
        capture_seeds()
    else:
        main()
