// Package sim is softroce's deterministic simulator: it runs real softroce
// devices (package rxe, driven sans-I/O) on a simulated network (package
// netsim) under a scenario's topology, faults and workloads, on virtual
// time, and checks invariants of RDMA transport on every run.
//
// # Determinism
//
// A run is a pure function of (scenario, seed, source code). One goroutine
// runs one event loop (another turns the event log's records into text and
// its hash, in order, and decides nothing); events are ordered by (virtual
// time, scheduling sequence number); every random choice (fault decisions per link direction,
// operation mix and sizes per flow, starting PSNs, device key bytes) comes
// from a stream derived from the seed by name (fault.Stream), so adding a
// flow or a fault does not perturb the others; nothing reads the wall clock,
// depends on map iteration order or on goroutine scheduling; memory regions
// are registered at fixed I/O virtual addresses (rxe.Device.RegMRIOVA), so
// the addresses on the wire do not depend on Go's heap. The event log (a line
// per frame delivered or dropped, per partition change, per operation posted
// and completed, per violation) and the pcapng capture are byte-identical
// for the same seed; Result.EventLog is the SHA-256 of the log. A frame's
// line names its length, a fingerprint (sum=) and its opcode, QPN and PSN;
// the lines of its later hops, where it arrives unchanged, name the link,
// length and fingerprint only.
//
// A scenario marked "parallel" runs on two cores (parallel.go): its hosts
// on one loop, its switches on another, a window of the host links' delay
// at a time, the frames that crossed exchanged between windows. It is as
// deterministic (the same on one core as on two, with or without a
// report), but events of the two halves at the same instant run in the
// windows' order, not in the order they were scheduled, so its event log
// differs from the serial run's. The report's samples and the PFC deadlock
// check run between windows; timed faults, partitions, PFC storms and
// captures are refused.
//
// # Model
//
// Each host has one port. A link joins two nodes (hosts or switches); each
// direction has a bandwidth (serialization counts Ethernet's 24 bytes of
// preamble, FCS and gap), a propagation delay, a drop-tail output queue
// bounded in bytes and/or frames, a fault model (package fault: independent
// and Gilbert-Elliott loss, duplication, delay, jitter, reordering, bit
// corruption confined to the bytes the ICRC covers), and a partition state.
// A switch forwards by destination MAC, or by destination IP for MACs it was
// not told (softroce devices without a link address frames by IP), along
// shortest paths; its output queues are its ports' link queues. A host hands
// its link one burst of frames at a time and takes the next when the wire has
// serialized it, as a NIC pulls from its queues; the device's timers run at
// Deadline.
//
// # Scenario files
//
// A scenario is JSON; unknown fields are errors. Durations are Go duration
// strings ("1.5ms") or integer nanoseconds; bandwidths "10Gbps", "800Mbps"
// or bits per second; sizes "64KiB", "1MB" or bytes.
//
//	{
//	  "name": "incast",                 // file name without .json, by convention
//	  "description": "...",
//	  "duration": "10s",                // simulated-time bound (default 1s)
//	  "drain": "50ms",                  // all work must complete this soon after the last heal
//	  "allow_errors": false,            // accept failed completions
//	  "mtu": 1500,                      // hosts' IP MTU (default 1500: path MTU 1024)
//	  "hosts": [{"name": "a", "ip": "10.0.0.1", "mac": "02:00:00:00:00:01", "mtu": 9000}],
//	  "host_count": 9,                  // adds h0..h8 (IP 10.0.0.1.., MAC 02:00:00:00:00:01..)
//	  "switches": [{"name": "s1", "latency": "500ns",
//	                "pfc": {"xoff": "100KB", "xon": "50KB", "headroom": "50KB", "quanta": 65535,
//	                        "watchdog_detect": "1ms", "watchdog_restore": "20ms"}}],
//	  "links": [{"a": "h0", "b": "s1", "bandwidth": "10Gbps", "delay": "1us",
//	             "queue": "64KiB", "queue_frames": 0,
//	             "ecn": {"kmin": "100KB", "kmax": "400KB", "pmax": 0.2},  // RED marking
//	             "ba": {...same fields, for the b->a direction...},
//	             "fault": "loss=1%", "fault_ba": "..."}],
//	  "fat_tree": {"k": 4, "oversubscription": 1, "latency": "500ns",  // instead of hosts, star, links
//	               "host": {...link fields...}, "fabric": {...}, "host_down": {...}},
//	  "leaf_spine": {"leaves": 4, "spines": 2, "hosts_per_leaf": 8, "host": {...}, "fabric": {...}},
//	  "hpcc_topology": {"file": "fat.txt", "queue": "32MB", "latency": "0s", "pfc": {...},
//	                    "ecn": [{"bandwidth": "100Gbps", "kmin": "400KB", "kmax": "1600KB", "pmax": 0.2}]},
//	  "star": {"switch": "sw0", "latency": "500ns", "bandwidth": "10Gbps", "delay": "1us",
//	           "queue": "1MiB", "downlink": {...switch->host direction...}, "fault": "..."},
//	  "faults": [{"link": "h0-sw0", "spec": "loss=5%,reorder=2%", "from": "1ms", "until": "5ms"}],
//	  "partitions": [{"link": "h0->sw0", "start": "2ms", "heal": "12ms"}],
//	  "pfc_storms": [{"host": "h3", "from": "1ms", "until": "30ms"}],  // a stuck NIC's endless PAUSEs
//	  "workloads": [{
//	    "name": "mesh",
//	    "from": ["*"], "to": ["h0", "h1"],   // every (from, to) pair, never a host to itself
//	    "qps": 2,                            // QP pairs per host pair
//	    "transport": "RC",                   // RC, UC or UD
//	    "ops": {"SEND": 3, "SEND_IMM": 1, "WRITE": 2, "WRITE_IMM": 1, "READ": 2, "CAS": 1, "FADD": 1},
//	    "size": {"fixed": 4096} | {"min": 0, "max": 65536} | {"list": [64, 4096]},
//	    "count": 1000,                       // operations per QP
//	    "window": 8,                         // outstanding operations per QP
//	    "rate": 100000,                      // operations per second per QP (optional)
//	    "start": "0s",
//	    "recv_depth": 9, "recv_delay": "200us",  // receives kept posted; slow reposting
//	    "mtu": 1024, "timeout": 14, "retry_cnt": 7, "rnr_retry": 7, "min_rnr_timer": 1,
//	    "connect": "cm"                      // connect with the connection manager (RC, UC)
//	  }, {
//	    "name": "ws", "from": ["*"], "to": ["*"],   // a stream of flows instead of QP pairs:
//	    "flows": {"cdf": "websearch", "load": 0.3, "for": "2ms", "chunk": "64KiB"},
//	             // or {"file": "ws30_10ms.txt", "offset": "2s"}: an HPCC flow file
//	    "window": 8                          // WRITEs of at most chunk outstanding per flow
//	  }],
//	  "congestion": {"dcqcn": true,          // or "ecn", "np", "rp" one by one
//	                 "params": {"rp_ai_rate": 20}},  // mlx5 names and units
//	  "fast_recovery": false,                // true: recover from loss sooner than kernel rxe does
//	  "parallel": false,                     // true: hosts and switches on two cores (see Determinism)
//	  "expect": {"statuses": ["SUCCESS", "RETRY_EXC_ERR", "WR_FLUSH_ERR"],
//	             "sometimes": ["retransmit", "rnr", "nak_seq", "duplicate_request", "corrupt",
//	                           "drop_queue", "partition", "retry_exceeded", "uc_loss", "ud_loss",
//	                           "cm_retransmit", "ecn_marked", "cnp", "rate_cut", "pfc_pause",
//	                           "drop_headroom", "pfc_storm", "pfc_deadlock"],
//	             "fair": [{"from": "7ms", "until": "14ms", "jain": 0.93, "min_total": "80Gbps",
//	                       "flows": ["w/h1->h0/0", "w/h2->h0/0"]}],
//	             "queues": [{"link": "sw0->h0", "max": "1MB", "settle": "5ms", "below": "400KB"}],
//	             "rates": [{"flow": "victim/b->v/0", "from": "0.5ms", "until": "2.5ms", "max": "40Gbps"}],
//	             "fct": [{"group": "0-50%", "p50_max": 2.5, "p95_max": 4, "p99_max": 5}]}
//	}
//
// With "connect": "cm" the QPs are connected the way rdma_cm connects them
// (cm.go): the responder's host listens, the requester's sends the REQ, each
// side moves its QP to RTS from the other's REP or REQ, the operations begin
// after the RTU. The MADs cross the simulated network with its faults, the
// connection manager retransmits on the devices' timers in virtual time, and
// the event log records each REQ and REP taken.
//
// Link names in faults and partitions are "A-B" (both directions), "A->B"
// (one) or "*" (all). Fault specs follow package fault's grammar; the spec's
// own seed item is ignored: each fault draws from the run's seed. Of two
// fault models overlapping on one direction, the later start wins.
//
// # Invariants
//
// Every run checks:
//
//   - integrity: every message (SEND, SEND_IMM) arrives with the bytes sent
//     (each carries its flow and sequence number and a pattern derived from
//     them), length and immediate data; WRITE_IMM carries its number as the
//     immediate.
//   - exactly-once: RC delivers every message once, in posting order. (UC and
//     UD may lose messages and deliver network duplicates or reordered ones:
//     a UC responder starts a new message at any FIRST or ONLY packet whose
//     PSN is unexpected. Their content is still checked.)
//   - memory-model: READ, CMP_SWAP and FETCH_ADD return what a sequential
//     reference model of the responder's memory says, and at the end the
//     responder's memory equals the model (RC). A WRITE or atomic posted
//     while an overlapping READ is outstanding is fenced, as a correct
//     application must: a retried READ is executed again (IBTA 9.4.4).
//   - posting-order: send completions come in posting order per QP, once.
//   - completion: opcodes match the operation; after a QP's first failed
//     completion the rest are WR_FLUSH_ERR.
//   - status: every operation succeeds, unless the scenario allows errors or
//     lists the statuses it expects.
//   - liveness: all work completes before the duration ends, and within
//     drain of the last fault healing.
//   - counters: frames the network delivered to a host equal the device's
//     rcvd_pkts plus its receive drops; frames a host sent equal its
//     sent_pkts (less loopback and unroutable).
//   - corruption: no device accepts a frame whose ICRC is wrong (the network
//     corrupts only bytes the ICRC covers; a frame corrupted on two hops
//     can come out intact, and then it is a good frame).
//   - coverage: each event the scenario lists under "sometimes" happened.
//   - congestion: over each "fair" window, Jain's index of the flows'
//     sending rates (payload their requesters put on the wire) is at least
//     "jain" and their sum at least "min_total"; each "queues" bound holds;
//     each "rates" flow's mean sending rate and each "fct" group's
//     slowdown percentiles are within their bounds.
//
// # Congestion control and reports
//
// "congestion" turns on the hosts' DCQCN (package qp's notification and
// reaction points, package rxe's settings, each host's line rate its
// link's); "ecn" on a link direction marks CE by RED as frames join its
// queue (netsim.RED). Options.Report (softroce sim run --report DIR)
// samples every flow's sending rate, goodput and rate-limiter setting and
// every queue's depth once per interval of virtual time (report.go); the
// samples are read between events, so a run with a report has the same
// event log as one without. A scenario with "fair" or "queues" expectations
// gathers one at 100 us.
//
// # Data-centre topologies and flows
//
// "fat_tree" and "leaf_spine" generate hosts h0.., switches and links
// (topology.go); where several shortest paths lead to a host, switches
// spread frames over them by ECMP on the IP addresses and UDP ports (each
// RoCE QP has its own source port, so a QP keeps one path). A workload
// with "flows" (flows.go) draws flows per source host as a Poisson process
// filling "load" of its link, destinations uniformly, sizes from a flow-size
// CDF (WebSearch, FB_Hadoop or given points); each flow is a QP pair that
// WRITEs its bytes. Result.FCT (fct.go) then has every flow's completion
// time, its ideal on an idle network (path latency plus serialization at
// the host's rate) and the slowdown, with p50/p95/p99 by size group as the
// DCQCN and HPCC studies plot them. A flows workload's bytes are bulk: its
// flows share their hosts' regions and the bytes are not checked.
//
// "hpcc_topology" and a flows workload's "file" read the HPCC ns-3
// simulator's topology and flow files as they are (hpcc.go; Load reads
// them, relative to the scenario), so the same network and flows run in
// both; sim/report sets the FCTs side by side.
//
// A switch with "pfc" is lossless (netsim's pfc.go; CS6 and CS7 frames,
// CNPs among them, go by a strict-priority queue that PAUSEs do not stop):
// past XOff bytes
// queued from an ingress port it pauses that port's upstream with 802.1Qbb
// PAUSE frames, which the capture shows; pauses spread hop by hop; only a
// headroom overflow drops. Result.PFC counts PAUSEs and XONs per switch,
// and each link direction reports how long it was paused. "pfc_storms"
// make hosts' NICs pause without end; a switch's watchdog finds a port
// paused that long with frames waiting, drops them and ignores its PAUSEs
// for a while. Every millisecond a run with PFC looks for a cycle in the
// wait-for graph of paused ports; one that holds across two checks is a
// deadlock (Result.Deadlocks), a congestion violation unless "sometimes"
// lists pfc_deadlock.
package sim
