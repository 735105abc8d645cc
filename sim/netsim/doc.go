// Package netsim is the simulator's discrete-event network: a virtual clock
// and event loop, seeded random streams, and links and switches that delay,
// queue, drop, duplicate, reorder, corrupt, ECN-mark and (with PFC) pause
// Ethernet frames.
//
// A Loop runs on one goroutine. Events are ordered by (virtual time,
// scheduling sequence number); randomness comes from streams derived from one
// seed by name; nothing iterates a map in an order that matters. The same
// inputs and seed therefore give the same sequence of events, bit for bit, on
// any machine. A network may be split in shards, each on a Loop of its own
// (shard.go), which a caller may run on goroutines of its own, a window of
// the pipes' delay between shards at a time: the events are the same as
// when they run one after another. Frames in flight on a pipe, and frames a switch holds for its
// latency, wait in lanes whose times never decrease, with only each lane's
// head in the event heap under the time and sequence number it was given
// (lane.go): the order is the same, and the heap stays small.
//
// A link direction (Pipe) models an output port and a wire: frames wait in a
// bounded drop-tail queue (marked CE by RED when SetECN installs it), are
// serialized at the link's bandwidth, propagate for the link's delay, and
// pass through the direction's fault model and partition state. A Switch
// forwards frames by destination MAC (or, for addresses it has not been
// told, destination IP) to the egress Pipe of the port that leads to that
// host, spreading them by ECMP where several ports do; its per-port output
// queues are those Pipes' queues. A switch with PFC (pfc.go) makes its
// ports and their peers lossless: each port has eight queues by DSCP class,
// frames of a lossless priority wait in theirs until a PAUSE for it lifts,
// and the switch sends 802.1Qbb PAUSEs upstream, per priority, past XOFF.
package netsim
