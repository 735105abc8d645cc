// Package packet is the RoCE v2 wire format: the InfiniBand transport headers
// (BTH and the extension headers), their encoding and decoding, the ICRC, the
// IP/UDP/Ethernet framing softroce sends and accepts, and gopacket layers for
// tools and tests. It must be byte-exact with Linux kernel Soft-RoCE (rdma_rxe);
// the rxe captures under testdata/pcaps/rxe are its golden tests.
//
// # Design
//
// Header views. Each header is a byte-slice type (BTH, RETH, AETH, AtomicETH,
// AtomicAckETH, ImmDt, IETH, DETH, FETH) with accessors that read fields in
// place and an Encode method that writes a fields struct, in the style of
// gVisor's netstack. The bit layout of every header lives only here. Views do
// not check lengths: the decoders below do, before making a view.
//
// Packet. A Packet is a decoded transport packet: the BTH fields, the
// extension headers its opcode calls for, and the payload. The opcode table
// (OpcodeInfo, from IBTA vol. 1 table 38 and rxe_opcode.c) says which headers
// follow the BTH, in which order, and whether payload is allowed.
// Packet.Decode checks structure (length, known opcode, version, pad count,
// payload allowed and of the right length) and never panics on hostile input;
// Payload aliases the input, so decoding copies nothing and allocates
// nothing. Packet.AppendTo encodes into a caller's buffer, growing it only
// when it is short, and sets PadCnt from the payload length. Reserved bits
// are kept (BTH Resv6/Resv7, DETH and FETH Resv) so that a decoded packet
// re-encodes to identical bytes. RD opcodes are unknown: rxe has no RD QPs.
//
// ICRC. ComputeICRC, SetICRC and CheckICRC implement the invariant CRC of
// IBTA annex A17 exactly as rxe_icrc.c does: CRC-32 seeded with eight 0xFF
// bytes (the masked LRH), over the IP and UDP headers and the BTH with the
// variant fields set to ones (IPv4 TOS, TTL, checksum; IPv6 traffic class,
// flow label, hop limit; UDP checksum; BTH byte 4), then the rest of the
// packet; stored least significant byte first. The IPv4 header checksum and
// the UDP checksum are what guard the masked IP fields; ParseIP checks them.
// The CRC itself (UpdateCRC32) is hash/crc32's, but for slicing-by-8 where
// carry-less multiplies are slow (an emulated processor) and a 256-bit
// fold in assembly where they are wide (crcfold_amd64.s).
//
// Frames. Addressing holds the IP and UDP fields of a packet; AppendFrame,
// AppendIPPacket and AppendUDPPayload build what rxe puts on the wire (UDP
// checksum 0, the ICRC computed over the headers that will carry it).
// ParseFrame and ParseIP take an Ethernet frame (optionally VLAN-tagged) or
// an IP packet apart into views, and drop what the Linux IP and UDP layers
// would drop before rxe sees it (options, fragments, bad lengths, bad IPv4
// header or non-zero UDP checksum); Frame.ICRCOK checks the ICRC.
//
// gopacket layers. The files layers*.go make each header a gopacket layer
// (LayerTypeBTH, LayerTypeRETH, ...) that decodes and serializes through the
// views above, and register UDP port 4791, so gopacket.NewPacket on a frame
// yields Ethernet, IP, UDP, BTH, the extension headers and a Payload. The
// BTHLayer carries the pad bytes and the ICRC; VerifyICRC checks a decoded
// packet's ICRC; SetNetworkLayersForICRC lets gopacket.SerializeLayers with
// ComputeChecksums write the right ICRC, and FixFrameICRC repairs one after
// the fact. DecodingLayers gives linked layers for a
// gopacket.DecodingLayerParser (an extension header alone does not say what
// follows it; the BTH opcode does). Packet.SerializableLayers and
// Packet.FromLayers convert between the two worlds. The data path (Decode, AppendTo, the ICRC, ParseFrame)
// does not use gopacket.
//
// Connection management. A MAD (mad.go) is the 256-byte payload of a UD
// SEND ONLY between the QP 1s of two ports with the GSI Q_Key; Packet.MAD
// finds one and ParseCMMAD checks it is the connection manager's. The CM
// messages (cm*.go: REQ, REP, RTU, REJ, MRA, DREQ, DREP, SIDR_REQ,
// SIDR_REP) are fields structs with Decode and Encode over the MAD's data,
// allocation-free, with their private data aliased; CMAHeader is the
// rdma_cm header at the front of a REQ's private data. MADLayer is their
// gopacket layer, after the DETH of a MAD.
//
// The tests check the encoding against independent oracles: tshark's
// InfiniBand dissector for every field of every opcode, scapy's
// scapy.contrib.roce for the ICRC, and the kernel captures (CM messages: the
// rping, send_rdmacm and udaddy captures re-encode byte for byte, and tshark
// dissects every field of random messages as they were encoded).
package packet
