#!/usr/bin/env bash
# Warpcore's main job, for now: decode real Linux soft-iWARP (siw) traffic with iwdump.
# Installs what is missing, builds in release mode, and runs iwdump on the captures shipped in
# apps/tests/data (MPA v1, v2, v2 with CRC, v2 peer-to-peer): negotiated parameters,
# per-opcode counts, CRC verdicts. Then it flips one CRC octet in a copy of a capture to show
# how a corrupted FPDU is reported (iwdump exits non-zero on it).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh --demo
cargo build --release -q -p warpcore-apps --bin iwdump
iwdump=target/release/iwdump
data=apps/tests/data

for f in siw_mpa1_rping.pcap siw_mpa2_rping.pcap siw_mpa2crc_rping.pcap siw_mpa2p2p_rping.pcap \
         siw_mpa2crc_ib_write_lat.pcap; do
    if [[ -f "$data/$f" ]]; then
        printf '\n######## iwdump %s\n' "$f"
        "$iwdump" "$data/$f"
    fi
done

printf '\n######## iwdump -v on the first messages of siw_mpa2crc_rping.pcap\n'
"$iwdump" -v "$data/siw_mpa2crc_rping.pcap" | head -n 30

# Corrupt the CRC of the first data FPDU sent after the MPA Reply and show the verdict.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$data/siw_mpa2crc_rping.pcap" "$tmp/corrupt.pcap" <<'PY'
import struct, sys
src, dst = sys.argv[1], sys.argv[2]
raw = bytearray(open(src, "rb").read())
# classic pcap: 24-byte global header, then 16-byte record headers
off, seen_reply = 24, False
while off + 16 <= len(raw):
    incl = struct.unpack_from("<I", raw, off + 8)[0]
    pkt = off + 16
    eth_ip = pkt + 14
    ihl = (raw[eth_ip] & 0x0F) * 4
    tcp = eth_ip + ihl
    doff = (raw[tcp + 12] >> 4) * 4
    payload = tcp + doff
    end = pkt + incl
    body = bytes(raw[payload:end])
    if body.startswith(b"MPA ID Rep Frame"):
        seen_reply = True
    elif seen_reply and len(body) >= 8:
        raw[end - 1] ^= 0xFF   # last octet of the segment = last CRC octet of its last FPDU
        break
    off = end
open(dst, "wb").write(raw)
PY
printf '\n######## iwdump on a copy with one CRC octet flipped (expect a CRC error, exit 1)\n'
set +e
"$iwdump" "$tmp/corrupt.pcap"
rc=$?
set -e
echo "iwdump exit status: $rc"
[[ $rc -ne 0 ]] || { echo "demo: the corrupted capture was not flagged" >&2; exit 1; }
echo "demo: done"
