#!/usr/bin/python3
"""Print the RoCE v2 ICRC scapy computes for every frame of a pcap.

Usage: scapy_icrc.py FILE.pcap

For each frame, one line: "<frame number> <ICRC>", the ICRC as the four
bytes scapy would put on the wire (hex), or "<frame number> -" when scapy does
not see an IPv4/UDP/BTH packet. scapy.contrib.roce's BTH.compute_icrc is the
oracle (reference §5): the stored ICRC is discarded and recomputed, so the
result does not depend on what the frame carries. Used by
packet/scapy_test.go; run it with Debian's /usr/bin/python3 (python3-scapy).
"""
import sys

from scapy.all import IP, UDP, rdpcap, raw
from scapy.contrib.roce import BTH


def main(path):
    for n, pkt in enumerate(rdpcap(path), start=1):
        if IP not in pkt or UDP not in pkt or BTH not in pkt:
            print(n, "-")
            continue
        bth = pkt[BTH]
        bth.icrc = None  # make post_build recompute it
        built = raw(pkt[IP])
        ip_len = pkt[IP].len
        print(n, built[ip_len - 4:ip_len].hex())


if __name__ == "__main__":
    main(sys.argv[1])
