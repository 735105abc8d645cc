package interop

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// hostCase is one program pair for testSoftroce: the kernel-rxe program in
// the guest and the softroce subcommand on the host, both without the peer
// address, and how to tell that each side succeeded.
type hostCase struct {
	name  string
	guest string   // guest script; {peer} stands for the server's address ("" in the server)
	host  []string // softroce arguments, without link flags
	// dropIn, when set, is an unmodified Debian program that softroce runs
	// with its drop-in libibverbs.so.1 (`softroce run`) instead of host.
	dropIn  []string
	check   func(t *testing.T, who string, r Result) // success of one side
	minRoCE int                                      // RoCE frames the capture must hold
	jumbo   bool                                     // path MTU 4096: guest b (MTU 9000), softroce --mtu 9000
	// retxRole is softroce's role ("client", "server") in which the
	// capture must show resent packets: the lossy side sends the data.
	// "any" only logs their number; "" neither.
	retxRole string
	// ipv6 runs the case between IPv6 GIDs: softroce at hostAddr6 (udp
	// link) or stackAddr6 (tap link), {gid} in guest the guest's GID index
	// for its fd77:: address.
	ipv6 bool
	// guestReady, when set, is the guest script that waits until the guest
	// server is ready (default: its TCP port 18515 listens).
	guestReady string
	// noOOB: the programs connect without an out-of-band socket (rdma_cm),
	// so there is no TCP port to see the softroce server listen on; the
	// guest client retries instead. {roce} in guest is softroce's RoCE
	// address (which differs from the host's on the tap link).
	noOOB bool
	// serverOnly runs only the role where softroce is the server (see
	// rdmacmDropInCases for why a case may need it).
	serverOnly bool
	// clientOnly runs only the role where softroce is the client.
	clientOnly bool
	// again, when set, names the known race of the programs' own that a
	// failed attempt with softroce as the server met ("" if none): the
	// whole case, softroce's side and the guest's, then runs again.
	again func(guest Result) string
	// decoded, when set, checks the capture's `softroce decode` listing;
	// complete says tcpdump lost none of the frames that crossed the bridge.
	decoded func(t *testing.T, decoded string, complete bool)
}

// rdmacmCase is librdmacm's rdma_server and rdma_client (rdmacm-utils)
// against softroce rdmacm: connection setup and teardown with CM MADs on
// QP 1, both directions.
func rdmacmCase() hostCase {
	ok := func(t *testing.T, who string, r Result) {
		t.Helper()
		require.Equal(t, 0, r.Status, "%s exit status; output:\n%s", who, r.Output)
		require.Contains(t, r.Output, "end 0", "%s did not finish:\n%s", who, r.Output)
	}
	return hostCase{
		name: "rdmacm",
		// The server role runs rdma_server; the client retries while
		// softroce's server may not listen yet (a REJ "invalid service
		// ID" makes rdma_client fail at once).
		guest: `peer="{peer}"
if [ -z "$peer" ]; then exec rdma_server; fi
for i in 1 2 3 4 5 6 7 8 9 10; do rdma_client -s {roce} && exit 0; sleep 0.5; done
exit 1`,
		host:       []string{"rdmacm"},
		check:      ok,
		minRoCE:    9, // REQ REP RTU, SEND and ACK each way, DREQ DREP
		guestReady: "for i in $(seq 200); do rdma res show cm_id 2>/dev/null | grep -q LISTEN && exit 0; sleep 0.1; done; exit 1",
		noOOB:      true,
	}
}

// rstreamCase is Debian's rstream on kernel rxe (librdmacm's rsockets)
// against `softroce rstream`, softroce's Go rsockets (package rsocket):
// the same protocol from two independent implementations, data verified.
func rstreamCase() hostCase {
	args := "-S 65536 -C 50 -T v"
	return hostCase{
		name: "go_rstream",
		guest: fmt.Sprintf(`peer="{peer}"
if [ -z "$peer" ]; then exec rstream %s; fi
for i in 1 2 3 4 5 6 7 8 9 10; do rstream -s {roce} %s && exit 0; sleep 0.5; done
exit 1`, args, args),
		host: append([]string{"rstream"}, strings.Fields(args)...),
		check: func(t *testing.T, who string, r Result) {
			t.Helper()
			require.Equal(t, 0, r.Status, "%s exit status; output:\n%s", who, r.Output)
			require.Contains(t, r.Output, "custom", "%s did not finish:\n%s", who, r.Output)
		},
		minRoCE:    40,
		guestReady: `for i in $(seq 200); do rdma res show cm_id 2>/dev/null | grep -Eq "LISTEN.*:7471( |$)" && exit 0; sleep 0.1; done; exit 1`,
		noOOB:      true,
	}
}

func pingpongCase(tr string) hostCase {
	prog, size, iters := pingpongArgs(tr)
	return hostCase{
		name:    "pingpong_" + tr,
		guest:   fmt.Sprintf("%s -d rxe0 -g 1 -s %d -n %d {peer}", prog, size, iters),
		host:    []string{"pingpong", "--transport", tr, "-g", "1", "-s", strconv.Itoa(size), "-n", strconv.Itoa(iters)},
		check:   func(t *testing.T, who string, r Result) { requirePingpongOK(t, who, r, iters) },
		minRoCE: 2 * iters,
	}
}

// perfCase is perftest's ib_<verb>_bw (or _lat) against
// `softroce perf <verb>` (--lat), at path MTU 1024 with guest a.
// loss > 0 makes both senders lose that percentage of their frames: netem
// on the guest's eth0, --fault on softroce, so retransmission and NAK
// handling must interoperate.
func perfCase(verb string, lat bool, size, iters int, loss int) hostCase {
	return perfSpec{verb: verb, lat: lat, size: size, iters: iters, fault: loss, netem: loss}.hostCase()
}

// perfSpec is one perftest-against-softroce perf case.
type perfSpec struct {
	verb        string
	lat         bool
	size, iters int
	pathMTU     int    // -m on both sides; 0: the default (1024) and no flag; 4096 needs the jumbo guest
	fault       int    // percent loss on softroce's sends (--fault)
	netem       int    // percent loss on the guest's sends (netem)
	atomicOp    string // -A for atomics: "" (perftest's default, FETCH_AND_ADD) or CMP_AND_SWAP
	name        string
	// dcqcn runs softroce with congestion control on (--dcqcn) and kernel
	// rxe with traffic class 3 (--tclass=3): its packets leave CE-marked,
	// as a congested switch would mark them, softroce answers with CNPs,
	// which kernel rxe must drop without harm.
	dcqcn bool
}

func (p perfSpec) hostCase() hostCase {
	verb, size, iters := p.verb, p.size, p.iters
	kind, name := "bw", "perf_"+verb
	host := []string{"perf", verb, "-x", "1", "-s", strconv.Itoa(size), "-n", strconv.Itoa(iters)}
	if p.lat {
		kind, name = "lat", name+"_lat"
		host = append(host, "--lat")
	}
	guest := fmt.Sprintf("ib_%s_%s -d rxe0 -x 1 -F -s %d -n %d", verb, kind, size, iters)
	jumbo := false
	if p.pathMTU != 0 {
		host = append(host, "-m", strconv.Itoa(p.pathMTU))
		guest += fmt.Sprintf(" -m %d", p.pathMTU)
		jumbo = p.pathMTU > 1024
	}
	if p.atomicOp != "" {
		host = append(host, "-A", p.atomicOp)
		guest += " -A " + p.atomicOp
		name += "_" + strings.ToLower(p.atomicOp)
	}
	guest += " {peer}"
	switch {
	case p.fault > 0 && p.fault == p.netem:
		name += fmt.Sprintf("_loss%d", p.fault)
	case p.fault > 0:
		name += fmt.Sprintf("_fault%d", p.fault)
	case p.netem > 0:
		name += fmt.Sprintf("_netem%d", p.netem)
	}
	if p.fault > 0 {
		host = append(host, "--fault", fmt.Sprintf("loss=%d%%,seed=7", p.fault))
	}
	if p.dcqcn {
		host = append(host, "--dcqcn")
		guest = strings.Replace(guest, " {peer}", " --tclass=3 {peer}", 1)
		name += "_dcqcn"
	}
	if p.netem > 0 {
		// Scripts run under bash, so iproute2's tc is used, not busybox's.
		guest = fmt.Sprintf("tc qdisc replace dev eth0 root netem loss %d%% || exit 99\n%s; rc=$?\ntc qdisc del dev eth0 root\nexit $rc", p.netem, guest)
	}
	if p.name != "" {
		name = p.name
	}
	check := func(t *testing.T, who string, r Result) { requirePerfOK(t, who, r, size, iters) }
	if p.lat && (verb == "read" || verb == "atomic") {
		// read_lat.c's and atomic_lat.c's server only serves the client's
		// requests and waits for it to close: it measures nothing and
		// prints no result row, so it must just exit 0 after connecting.
		check = func(t *testing.T, who string, r Result) {
			t.Helper()
			if !strings.HasSuffix(who, " server") {
				requirePerfOK(t, who, r, size, iters)
				return
			}
			require.Equal(t, 0, r.Status, "%s exit status; output:\n%s", who, r.Output)
			require.Contains(t, r.Output, "remote address:", "%s never connected:\n%s", who, r.Output)
			t.Logf("%s: served, %v wall", who, r.Elapsed.Round(time.Millisecond))
		}
	}
	hc := hostCase{
		name:    name,
		guest:   guest,
		host:    host,
		check:   check,
		minRoCE: iters,
		jumbo:   jumbo,
	}
	if p.fault > 0 || p.netem > 0 {
		hc.retxRole = "any"
	}
	if p.dcqcn {
		hc.decoded = requireCNPsToKernel
	}
	// Data flows from the requester for write, from the responder for read;
	// softroce is the requester as the client. With 10 % loss on 30
	// four-packet messages, some data packet is lost for any seed but a
	// vanishingly unlikely one (0.9^120).
	dataFromClient := verb == "write"
	switch {
	case p.fault >= 10 && p.netem == 0 && dataFromClient:
		hc.retxRole = "client"
	case p.fault >= 10 && p.netem == 0:
		hc.retxRole = "server"
	case p.netem >= 10 && p.fault == 0 && dataFromClient:
		hc.retxRole = "server"
	case p.netem >= 10 && p.fault == 0:
		hc.retxRole = "client"
	}
	if verb == "read" && p.netem >= 10 && p.fault == 0 {
		// netem drops kernel rxe's READ responses: softroce as the client
		// repairs the holes inside a READ, and kernel rxe must answer.
		hc.decoded = requireReadRepairsAnswered
	}
	return hc
}

// readReqRE and readRespRE are `softroce decode` lines of a READ request
// (time, source, PSN, VA, length) and of a READ response (time, opcode,
// PSN), after the frame number.
var (
	readReqRE  = regexp.MustCompile(`(?m)^(\d+) (\S+) (\S+):\d+ -> \S+ RC_RDMA_READ_REQUEST .*?\bpsn=(\d+) .*?\bva=0x([0-9a-f]+) .*?\bdlen=(\d+) `)
	readRespRE = regexp.MustCompile(`(?m)^(\d+) (\S+) \S+ -> \S+ RC_RDMA_READ_RESPONSE_(\w+) .*?\bpsn=(\d+) `)
)

// requireReadRepairsAnswered checks a READ capture for repairs
// (qp/read_repair.go): READ requests for a range strictly inside the first
// READ's, after each of which a response at the repair's PSN must come.
// Where softroce was the requester (the client role), 10% loss on the
// responses leaves some hole inside a READ for any but a vanishingly
// unlikely run, so there must be repairs, and kernel rxe must have answered
// one as a subset: a LAST or ONLY at a PSN before the READ's end, which no
// answer to a whole READ or a go-back-N has.
//
// The answer must be in the capture only if the capture is complete: the
// requester cannot pass a hole without a response at its PSN, so one that
// crossed the bridge and is not in the capture is tcpdump's loss (it says
// so at exit), and is logged then, not failed. Nor is an answer needed for
// a repair that crossed the answer to an earlier request (see readRepairs).
func requireReadRepairsAnswered(t *testing.T, decoded string, complete bool) {
	t.Helper()
	rr, err := readRepairs(decoded)
	require.NoError(t, err)
	for _, c := range rr.crossed {
		t.Logf("%s; its own answer is not needed", c)
	}
	for _, u := range rr.unanswered {
		if !complete {
			t.Logf("%s\n(not a failure: tcpdump lost packets)", u)
			continue
		}
		require.Fail(t, u)
	}
	if rr.requester != "10.77.1.2" && rr.requester != "10.77.1.3" {
		require.Positive(t, rr.repairs, "softroce sent no repair READ at 10%% loss")
		require.Positive(t, rr.subsets, "kernel rxe answered no repair as a subset")
	}
	t.Logf("READ repairs in the capture: %d, %d answered with a subset's LAST or ONLY, %d crossed an earlier answer", rr.repairs, rr.subsets, len(rr.crossed))
}

// crossWindow is how soon before a repair READ an answer at its PSN may
// have come and still have crossed it, in seconds.
const crossWindow = 0.001

// readRepairsFound is what readRepairs finds in a capture.
type readRepairsFound struct {
	requester           string // source address of the first READ request
	repairs, subsets    int
	unanswered, crossed []string // one line each, saying where
}

// readRepairs finds the repair READs of a `softroce decode` listing and
// whether each was answered. A repair sent just after (within crossWindow)
// a response at its PSN arrived, to an earlier request, crossed it: the
// hole was filled as the repair went out (a race the requester cannot
// see), so its own answer is not needed, and netem may drop it like any
// other. (Seen once in CI: 1 us apart, the repair's answer never came.)
func readRepairs(decoded string) (readRepairsFound, error) {
	var f readRepairsFound
	reqs := readReqRE.FindAllStringSubmatch(decoded, -1)
	if len(reqs) == 0 {
		return f, errors.New("no READ request in the capture")
	}
	f.requester = reqs[0][3]
	va0, err := strconv.ParseUint(reqs[0][5], 16, 64)
	if err != nil {
		return f, err
	}
	size, err := strconv.ParseUint(reqs[0][6], 10, 64)
	if err != nil {
		return f, err
	}
	type resp struct {
		frame int
		at    float64
		op    string
	}
	answered := map[string][]resp{} // PSN -> responses
	for _, m := range readRespRE.FindAllStringSubmatch(decoded, -1) {
		n, _ := strconv.Atoi(m[1])
		at, _ := strconv.ParseFloat(m[2], 64)
		answered[m[4]] = append(answered[m[4]], resp{n, at, m[3]})
	}
	lastReq := map[string]int{} // PSN -> frame of the latest request at it so far
	for _, m := range reqs {
		frame, _ := strconv.Atoi(m[1])
		at, _ := strconv.ParseFloat(m[2], 64)
		psn := m[4]
		prev := lastReq[psn]
		lastReq[psn] = frame
		va, _ := strconv.ParseUint(m[5], 16, 64)
		n, _ := strconv.ParseUint(m[6], 10, 64)
		if va < va0 || va+n >= va0+size {
			continue // an original READ or a go-back-N to its end
		}
		f.repairs++
		found, subset, crossed := false, false, 0
		for _, r := range answered[psn] {
			found = found || r.frame > frame
			subset = subset || r.frame > frame && (r.op == "LAST" || r.op == "ONLY")
			if r.frame > prev && r.frame < frame && at-r.at < crossWindow {
				crossed = r.frame
			}
		}
		switch {
		case found:
		case crossed != 0:
			f.crossed = append(f.crossed, fmt.Sprintf("frame %s: repair READ at PSN %s crossed the answer at frame %d to an earlier request", m[1], psn, crossed))
		default:
			f.unanswered = append(f.unanswered, fmt.Sprintf("frame %s: repair READ at PSN %s (%d bytes at +%d) was never answered; the capture around it:\n%s",
				m[1], psn, n, va-va0, decodedAround(decoded, frame, 30)))
		}
		if subset {
			f.subsets++
		}
	}
	return f, nil
}

// decodedAround returns the lines of a `softroce decode` listing for the
// frames within around of frame.
func decodedAround(decoded string, frame, around int) string {
	var b strings.Builder
	for _, line := range strings.Split(decoded, "\n") {
		n, err := strconv.Atoi(strings.SplitN(line, " ", 2)[0])
		if err == nil && n >= frame-around && n <= frame+around {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// sweepSizes are the message sizes of the MTU-boundary sweep: below, at and
// above one packet at path MTU 1024, one 4096 packet, and many packets.
var sweepSizes = []int{1, 3, 1023, 1024, 1025, 4096, 65536, 1 << 20}

// sweepCases are ib_send_bw against softroce perf send for every sweep size
// at path MTU 1024 (guest a, MTU 1500) and 4096 (guest b, MTU 9000).
// Counts stay small so that each run takes about a second under TCG.
func sweepCases() []hostCase {
	var cs []hostCase
	for _, mtu := range []int{1024, 4096} {
		for _, size := range sweepSizes {
			iters := 10
			if size >= 1<<20 {
				iters = 5
			}
			cs = append(cs, perfSpec{verb: "send", size: size, iters: iters, pathMTU: mtu,
				name: fmt.Sprintf("sweep_send_m%d_s%d", mtu, size)}.hostCase())
		}
	}
	return cs
}

// lossCases are write and read bandwidth runs with 2 % and 10 % loss on one
// side at a time: softroce's own fault injection, then netem in the guest;
// then 10 % both ways at path MTU 4096 against the jumbo guest.
func lossCases() []hostCase {
	var cs []hostCase
	for _, verb := range []string{"write", "read"} {
		for _, pct := range []int{2, 10} {
			cs = append(cs,
				perfSpec{verb: verb, size: 4096, iters: 30, fault: pct}.hostCase(),
				perfSpec{verb: verb, size: 4096, iters: 30, netem: pct}.hostCase())
		}
		// Path MTU 4096 against the jumbo guest: 16 KiB messages are four
		// packets each, as 4 KiB ones are at 1024, so 10 % loss on the data
		// sender loses some packet for any seed (0.9^120).
		cs = append(cs,
			perfSpec{verb: verb, size: 16384, iters: 30, pathMTU: 4096, fault: 10,
				name: fmt.Sprintf("perf_%s_m4096_fault10", verb)}.hostCase(),
			perfSpec{verb: verb, size: 16384, iters: 30, pathMTU: 4096, netem: 10,
				name: fmt.Sprintf("perf_%s_m4096_netem10", verb)}.hostCase())
	}
	return cs
}

// perfRowRE is perftest's result row: bytes, iterations, then the
// bandwidth (peak, average, message rate) or latency figures.
var perfRowRE = regexp.MustCompile(`(?m)^\s*(\d+)\s+(\d+)((?:\s+[0-9.]+){3,})\s*$`)

func requirePerfOK(t *testing.T, who string, r Result, size, iters int) {
	t.Helper()
	require.Equal(t, 0, r.Status, "%s exit status; output:\n%s", who, r.Output)
	m := perfRowRE.FindStringSubmatch(r.Output)
	require.NotNil(t, m, "%s printed no result row:\n%s", who, r.Output)
	require.Equal(t, strconv.Itoa(size), m[1], who)
	require.Equal(t, strconv.Itoa(iters), m[2], who)
	t.Logf("%s: %s B x %s, figures %s, %v wall", who, m[1], m[2], strings.Join(strings.Fields(m[3]), " "), r.Elapsed.Round(time.Millisecond))
}

// cnpLineRE matches a CNP in a `softroce decode` listing: source, destination.
var cnpLineRE = regexp.MustCompile(`(?m)^\d+ \S+ (\S+?):\d+ -> (\S+) CNP qpn=\S+ psn=0 ackreq=0 becn len=16 icrc=ok$`)

// requireCNPsToKernel checks a dcqcn case's capture: kernel rxe's packets
// arrived CE-marked, softroce answered with CNPs (BECN, 16 bytes, good
// ICRC) to kernel rxe's address, and softroce's own packets left ECT(0).
// That the programs on both sides succeeded shows kernel rxe dropped the
// CNPs without harm.
func requireCNPsToKernel(t *testing.T, decoded string, _ bool) {
	t.Helper()
	cnps := cnpLineRE.FindAllStringSubmatch(decoded, -1)
	require.NotEmpty(t, cnps, "softroce sent no CNP for CE-marked packets:\n%s", decoded)
	require.Contains(t, decoded, " ecn=ce ", "kernel rxe's packets (tclass 3) carry CE")
	require.Contains(t, decoded, " ecn=ect0 ", "softroce's packets leave ECT(0) with --dcqcn")
	t.Logf("CNPs from softroce to kernel rxe: %d", len(cnps))
}
