#!/usr/bin/env python3
"""Plants a defect in one frame of a classic (libpcap) capture, for scripts/test-judges.sh.

    pcap-plant.py IN OUT FRAME OFFSET VALUE

FRAME counts from 1 as tshark does; OFFSET is from the start of the frame's captured data
(negative: from its end); VALUE is a number (the octet becomes VALUE) or "flip" (the octet
is inverted). Fails loudly if the capture is not a little-endian libpcap file or the frame
or offset does not exist.
"""
import struct
import sys


def main() -> None:
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    src, dst, frame, off, val = sys.argv[1:]
    frame, off = int(frame), int(off, 0)
    b = bytearray(open(src, "rb").read())
    if len(b) < 24 or struct.unpack("<I", b[:4])[0] not in (0xA1B2C3D4, 0xA1B23C4D):
        sys.exit(f"{src}: not a little-endian libpcap capture")
    pos, n = 24, 0
    while pos + 16 <= len(b):
        incl = struct.unpack("<I", b[pos + 8 : pos + 12])[0]
        n += 1
        if n == frame:
            start = pos + 16
            at = start + (off if off >= 0 else incl + off)
            if not start <= at < start + incl:
                sys.exit(f"{src}: frame {frame} has {incl} octets, no offset {off}")
            b[at] = b[at] ^ 0xFF if val == "flip" else int(val, 0)
            open(dst, "wb").write(b)
            return
        pos += 16 + incl
    sys.exit(f"{src}: no frame {frame} (it has {n})")


main()
