// Package pcapio reads and writes capture files.
//
// Reader opens classic pcap (microsecond or nanosecond) and pcapng files,
// optionally gzip-compressed, and yields one Record per packet with its link
// type, so that callers can find the IP header whatever captured the file
// (Ethernet, raw IP, Linux cooked SLL/SLL2, BSD loopback). Record.Frame parses
// a record straight into a packet.Frame.
//
// Writer produces pcapng files that depend only on the packets written: the
// section header carries the fixed application string "softroce" and nothing
// about the host, the interface block is fixed, and timestamps are whatever
// the caller passes (simulated time works), so the same packets give
// byte-identical files on any machine. A packet may carry a comment
// (opt_comment), which Wireshark shows as frame.comment.
package pcapio
