package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/pcapio"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const rxeDir = "../../testdata/pcaps/rxe"

// runCmd runs the softroce command tree in-process.
func runCmd(t testing.TB, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// rxeSummary reads "file: N frames, M RoCEv2" from SUMMARY.txt.
func rxeSummary(t testing.TB) map[string][2]int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(rxeDir, "SUMMARY.txt"))
	require.NoError(t, err)
	re := regexp.MustCompile(`(?m)^(\S+\.pcap): (\d+) frames, (\d+) RoCEv2, ICRC`)
	out := map[string][2]int{}
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		frames, _ := strconv.Atoi(m[2])
		roce, _ := strconv.Atoi(m[3])
		out[m[1]] = [2]int{frames, roce}
	}
	require.NotEmpty(t, out)
	return out
}

var countsRe = regexp.MustCompile(`frames=(\d+) roce=(\d+) good=(\d+) bad=(\d+) skipped=(\d+)$`)

// parseCounts reads a "... frames=N roce=N good=N bad=N skipped=N" line.
func parseCounts(t testing.TB, line string) decodeCounts {
	t.Helper()
	m := countsRe.FindStringSubmatch(line)
	require.NotNil(t, m, "counts line %q", line)
	n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
	return decodeCounts{frames: n(1), roce: n(2), good: n(3), bad: n(4), skipped: n(5)}
}

func lines(s string) []string { return strings.Split(strings.TrimSuffix(s, "\n"), "\n") }

func TestDecodeRxeCaptures(t *testing.T) {
	want := rxeSummary(t)
	files, err := filepath.Glob(filepath.Join(rxeDir, "*.pcap"))
	require.NoError(t, err)
	require.Len(t, files, len(want))
	for _, name := range files {
		t.Run(filepath.Base(name), func(t *testing.T) {
			w := want[filepath.Base(name)]
			code, out, errOut := runCmd(t, "decode", name)
			require.Equal(t, 0, code, "stderr: %s", errOut)
			assert.Empty(t, errOut)
			ls := lines(out)
			last := ls[len(ls)-1]
			require.True(t, strings.HasPrefix(last, "# total: "), last)
			c := parseCounts(t, last)
			assert.Equal(t, decodeCounts{frames: w[0], roce: w[1], good: w[1], skipped: w[0] - w[1]}, c)
			require.Len(t, ls, w[1]+1, "one line per RoCE packet and the total")
			for _, l := range ls[:len(ls)-1] {
				require.True(t, strings.HasSuffix(l, " icrc=ok"), l)
			}
		})
	}
}

func TestDecodeMultipleFiles(t *testing.T) {
	want := rxeSummary(t)
	a, b := filepath.Join(rxeDir, "atomic.pcap"), filepath.Join(rxeDir, "udaddy.pcap")
	code, out, _ := runCmd(t, "decode", a, b)
	require.Equal(t, 0, code)
	ls := lines(out)
	wa, wb := want["atomic.pcap"], want["udaddy.pcap"]
	require.Len(t, ls, 2+wa[1]+2+wb[1]+1)
	assert.Equal(t, "# "+a, ls[0])
	assert.Equal(t, decodeCounts{wa[0], wa[1], wa[1], 0, wa[0] - wa[1]}, parseCounts(t, ls[1+wa[1]]))
	assert.True(t, strings.HasPrefix(ls[1+wa[1]], "# "+a+": "))
	assert.Equal(t, "# "+b, ls[2+wa[1]])
	assert.True(t, strings.HasPrefix(ls[3+wa[1]+wb[1]], "# "+b+": "))
	tot := parseCounts(t, ls[len(ls)-1])
	assert.Equal(t, decodeCounts{wa[0] + wb[0], wa[1] + wb[1], wa[1] + wb[1], 0, wa[0] + wb[0] - wa[1] - wb[1]}, tot)
}

// textFields splits a text line into its leading positional fields and its
// key=value fields (values may be double-quoted).
var kvRe = regexp.MustCompile(`(\w+)=("[^"]*"|\S+)`)

func textFields(t *testing.T, line string) (pos []string, kv map[string]string) {
	t.Helper()
	tok := strings.Fields(line)
	require.GreaterOrEqual(t, len(tok), 6, line)
	pos = tok[:6] // frame, time, src:sport, "->", dst, opcode
	kv = map[string]string{}
	rest := strings.Join(tok[6:], " ")
	for _, m := range kvRe.FindAllStringSubmatch(rest, -1) {
		kv[m[1]] = m[2]
	}
	for _, w := range strings.Fields(kvRe.ReplaceAllString(rest, "")) {
		kv[w] = "" // bare flags such as se, fecn
	}
	return pos, kv
}

// TestDecodeGoldenAtomic checks selected lines of atomic.pcap field by
// field. The expected values were read with tshark 4.0
// (frame.time_relative, infiniband.* fields), not from softroce's output.
func TestDecodeGoldenAtomic(t *testing.T) {
	code, out, _ := runCmd(t, "decode", filepath.Join(rxeDir, "atomic.pcap"))
	require.Equal(t, 0, code)
	byFrame := map[string]string{}
	for _, l := range lines(out) {
		byFrame[strings.Fields(l)[0]] = l
	}
	tests := []struct {
		pos []string
		kv  map[string]string
	}{
		{[]string{"35", "2.841178000", "10.77.0.3:49441", "->", "10.77.0.2", "RC_FETCH_ADD"},
			map[string]string{"qpn": "0x000011", "psn": "6864879", "ackreq": "1", "va": "0x0000558095819000",
				"rkey": "0x0000022f", "add": "0x0000000000000001", "len": "0", "icrc": "ok"}},
		{[]string{"36", "2.843083000", "10.77.0.3:49441", "->", "10.77.0.2", "RC_FETCH_ADD"},
			map[string]string{"qpn": "0x000011", "psn": "6864880", "ackreq": "1", "va": "0x0000558095819040",
				"rkey": "0x0000022f", "add": "0x0000000000000001", "len": "0", "icrc": "ok"}},
		{[]string{"45", "2.849020000", "10.77.0.2:49441", "->", "10.77.0.3", "RC_ATOMIC_ACKNOWLEDGE"},
			map[string]string{"qpn": "0x000011", "psn": "6864879", "ackreq": "0", "syndrome": `"ACK credits=31"`,
				"msn": "1", "orig": fmt.Sprintf("0x%016x", uint64(11367111797028035972)), "len": "0", "icrc": "ok"}},
		{[]string{"99", "4.481049000", "10.77.0.3:49476", "->", "10.77.0.2", "RC_CMP_SWAP"},
			map[string]string{"qpn": "0x000012", "psn": "3402440", "ackreq": "1", "va": "0x000055ae21c89000",
				"rkey": "0x0000031a", "swap": "0x0000000000000000", "compare": "0x0000000000000000", "len": "0", "icrc": "ok"}},
		{[]string{"100", "4.481836000", "10.77.0.2:49476", "->", "10.77.0.3", "RC_ATOMIC_ACKNOWLEDGE"},
			map[string]string{"qpn": "0x000012", "psn": "3402440", "ackreq": "0", "syndrome": `"ACK credits=31"`,
				"msn": "1", "orig": fmt.Sprintf("0x%016x", uint64(17383893175772805719)), "len": "0", "icrc": "ok"}},
	}
	for _, tc := range tests {
		line, ok := byFrame[tc.pos[0]]
		require.True(t, ok, "frame %s not printed", tc.pos[0])
		pos, kv := textFields(t, line)
		assert.Equal(t, tc.pos, pos, line)
		assert.Equal(t, tc.kv, kv, line)
	}
	// The first RoCE packet is frame 35: the line order is the file's.
	assert.True(t, strings.HasPrefix(out, "35 2.841178000 "), out[:40])
}

// damagedCapture copies write.pcap to a pcapng file with three RoCE frames
// damaged: one payload bit flipped (bad ICRC), one opcode made unknown (ICRC
// fixed up, so only decoding fails) and one cut short (IP length wrong). It
// returns the file and the damaged frames' numbers.
func damagedCapture(t *testing.T) (path string, flipped, unknown, cut int) {
	t.Helper()
	r, err := pcapio.Open(filepath.Join(rxeDir, "write.pcap"))
	require.NoError(t, err)
	defer r.Close()
	path = filepath.Join(t.TempDir(), "damaged.pcapng")
	w, err := pcapio.Create(path)
	require.NoError(t, err)
	frame := 0
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		frame++
		data := append([]byte(nil), rec.Data...)
		rec.Data = data
		var f packet.Frame
		comment := ""
		if rec.Frame(&f) == nil {
			var p packet.Packet
			require.NoError(t, p.Decode(f.Transport))
			switch {
			case flipped == 0 && len(p.Payload) > 0:
				p.Payload[len(p.Payload)/2] ^= 0x10 // aliases data
				flipped, comment = frame, "flipped"
			case unknown == 0 && flipped != 0 && p.BTH.Opcode == packet.RCAcknowledge:
				f.Transport[0] = 0x1E
				packet.SetICRC(f.IPUDP(), f.Transport)
				unknown, comment = frame, "unknown opcode"
			case cut == 0 && unknown != 0 && len(p.Payload) > 0:
				data = data[:len(data)-8]
				cut, comment = frame, "cut"
			}
		}
		require.NoError(t, w.WritePacket(rec.Time, data, comment))
	}
	require.NoError(t, w.Close())
	require.NotZero(t, flipped)
	require.NotZero(t, unknown)
	require.NotZero(t, cut)
	return path, flipped, unknown, cut
}

func TestDecodeDamaged(t *testing.T) {
	path, flipped, unknown, cut := damagedCapture(t)
	want := rxeSummary(t)["write.pcap"]

	code, out, errOut := runCmd(t, "decode", path)
	require.Equal(t, exitFailed, code, "stderr: %s", errOut)
	assert.Contains(t, errOut, "3 of 90 RoCE packets bad")
	ls := lines(out)
	require.Len(t, ls, want[1]+1)
	assert.Equal(t, decodeCounts{frames: want[0], roce: want[1], good: want[1] - 3, bad: 3, skipped: want[0] - want[1]},
		parseCounts(t, ls[len(ls)-1]))
	bad := map[int]string{}
	for _, l := range ls[:len(ls)-1] {
		n, err := strconv.Atoi(strings.Fields(l)[0])
		require.NoError(t, err)
		if !strings.HasSuffix(l, " icrc=ok") {
			bad[n] = l
		}
	}
	require.Len(t, bad, 3, "%v", bad)

	_, kv := textFields(t, bad[flipped])
	assert.Equal(t, "BAD", kv["icrc"], bad[flipped])
	assert.NotContains(t, kv, "error")
	assert.Contains(t, kv, "va") // decoded normally: RDMA WRITE FIRST/ONLY

	pos, kv := textFields(t, bad[unknown])
	assert.Equal(t, "UNKNOWN(0x1e)", pos[5])
	assert.Equal(t, "ok", kv["icrc"])
	assert.Equal(t, strconv.Quote(packet.ErrUnknownOpcode.Error()), kv["error"])

	tok := strings.Fields(bad[cut])
	assert.Equal(t, "->", tok[3])
	assert.Contains(t, bad[cut], "error="+strconv.Quote(packet.ErrBadLength.Error()))

	// The same in JSON.
	code, out, _ = runCmd(t, "decode", "--json", path)
	require.Equal(t, exitFailed, code)
	objs := jsonLines(t, out)
	byFrame := map[int]map[string]any{}
	for _, o := range objs {
		if o["type"] == "packet" {
			byFrame[int(o["frame"].(float64))] = o
		}
	}
	assert.Equal(t, false, byFrame[flipped]["icrc_ok"])
	assert.NotContains(t, byFrame[flipped], "error")
	assert.Equal(t, true, byFrame[unknown]["icrc_ok"])
	assert.Equal(t, packet.ErrUnknownOpcode.Error(), byFrame[unknown]["error"])
	assert.Equal(t, "UNKNOWN", byFrame[unknown]["opcode"])
	assert.EqualValues(t, 0x1E, byFrame[unknown]["opcode_num"])
	assert.Equal(t, packet.ErrBadLength.Error(), byFrame[cut]["error"])
	assert.EqualValues(t, packet.UDPPort, byFrame[cut]["dport"])
	sum := objs[len(objs)-1]
	assert.Equal(t, "summary", sum["type"])
	assert.EqualValues(t, 3, sum["bad"])
}

func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	for i, l := range lines(out) {
		var o map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &o), "line %d: %s", i+1, l)
		objs = append(objs, o)
	}
	return objs
}

func TestDecodeJSON(t *testing.T) {
	want := rxeSummary(t)
	files := []string{"send.pcap", "atomic.pcap", "read.pcap", "udaddy.pcap", "rc_pingpong_ipv6.pcap"}
	var args []string
	for _, f := range files {
		args = append(args, filepath.Join(rxeDir, f))
	}
	code, out, _ := runCmd(t, append([]string{"decode", "--json"}, args...)...)
	require.Equal(t, 0, code)
	objs := jsonLines(t, out)

	common := []string{"type", "file", "frame", "time", "ts", "src", "sport", "dst", "dport", "opcode",
		"opcode_num", "qpn", "psn", "ackreq", "se", "fecn", "becn", "pkey", "len", "icrc_ok"}
	byOpcode := map[string][]string{
		"RC_RDMA_READ_REQUEST":         {"reth_va", "reth_rkey", "reth_len"},
		"RC_ACKNOWLEDGE":               {"syndrome", "syndrome_str", "msn"},
		"RC_ATOMIC_ACKNOWLEDGE":        {"syndrome", "syndrome_str", "msn", "orig"},
		"RC_CMP_SWAP":                  {"atomic_va", "atomic_rkey", "swap_add", "compare"},
		"RC_FETCH_ADD":                 {"atomic_va", "atomic_rkey", "swap_add"},
		"UD_SEND_ONLY":                 {"qkey", "src_qp"},
		"UD_SEND_ONLY_WITH_IMMEDIATE":  {"qkey", "src_qp", "imm"},
		"RC_SEND_ONLY":                 {},
		"RC_RDMA_READ_RESPONSE_FIRST":  {"syndrome", "syndrome_str", "msn"},
		"RC_RDMA_READ_RESPONSE_MIDDLE": {},
	}
	// A MAD on QP 1 adds its CM message's fields.
	byCM := map[string][]string{
		"SIDR_REQ": {"cm", "cm_tid", "cm_request_id", "cm_service_id", "cm_src", "cm_dst"},
		"SIDR_REP": {"cm", "cm_tid", "cm_request_id", "cm_status", "cm_qpn", "cm_qkey"},
	}
	perFile := map[string]int{}
	seen := map[string]bool{}
	var fileObjs []map[string]any
	for i, o := range objs[:len(objs)-1] {
		switch o["type"] {
		case "packet":
			op, _ := o["opcode"].(string)
			extra, known := byOpcode[op]
			keys := append(append([]string(nil), common...), extra...)
			if cm, ok := o["cm"].(string); ok {
				require.Contains(t, byCM, cm, "line %d", i+1)
				keys = append(keys, byCM[cm]...)
				seen[cm] = true
			}
			for _, k := range keys {
				assert.Contains(t, o, k, "line %d %s", i+1, op)
			}
			if known {
				seen[op] = true
				assert.Len(t, o, len(keys), "line %d %s: unexpected fields %v", i+1, op, o)
			}
			assert.NotContains(t, o, "error")
			assert.Equal(t, true, o["icrc_ok"])
			assert.EqualValues(t, packet.UDPPort, o["dport"])
			perFile[o["file"].(string)]++
			for _, k := range []string{"reth_va", "atomic_va", "swap_add", "compare", "orig"} {
				if v, ok := o[k]; ok {
					assert.Regexp(t, `^0x[0-9a-f]{16}$`, v)
				}
			}
		case "file":
			fileObjs = append(fileObjs, o)
		default:
			t.Fatalf("line %d: type %v", i+1, o["type"])
		}
	}
	for op := range byOpcode {
		assert.True(t, seen[op], "no %s packet seen", op)
	}
	require.Len(t, fileObjs, len(files))
	total := 0
	for i, fo := range fileObjs {
		w := want[files[i]]
		assert.Equal(t, args[i], fo["file"])
		assert.EqualValues(t, w[0], fo["frames"])
		assert.EqualValues(t, w[1], fo["roce"])
		assert.EqualValues(t, w[1], fo["good"])
		assert.EqualValues(t, 0, fo["bad"])
		assert.EqualValues(t, w[0]-w[1], fo["skipped"])
		assert.Equal(t, w[1], perFile[args[i]])
		total += w[1]
	}
	sum := objs[len(objs)-1]
	assert.Equal(t, "summary", sum["type"])
	assert.EqualValues(t, len(files), sum["files"])
	assert.EqualValues(t, total, sum["roce"])
	assert.EqualValues(t, total, sum["good"])
	assert.EqualValues(t, 0, sum["unreadable"])
}

// TestDecodeMatchesTshark compares every RoCE packet of every rxe capture
// with Wireshark's InfiniBand dissector, an independent decoder.
func TestDecodeMatchesTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("tshark not installed (CI=true)")
		}
		t.Skip("tshark not installed")
	}
	files, err := filepath.Glob(filepath.Join(rxeDir, "*.pcap"))
	require.NoError(t, err)
	// tshark field -> our JSON field and how to render ours like tshark;
	// a field with a CM message name applies to that message only (tshark
	// names each message's fields apart; we name them alike).
	fields := []struct {
		tshark, ours, when string
	}{
		{"frame.number", "frame", ""},
		{"frame.time_relative", "time", ""},
		{"udp.srcport", "sport", ""},
		{"infiniband.bth.opcode", "opcode_num", ""},
		{"infiniband.bth.destqp", "qpn", ""},
		{"infiniband.bth.psn", "psn", ""},
		{"infiniband.bth.a", "ackreq", ""},
		{"infiniband.bth.p_key", "pkey", ""},
		{"infiniband.reth.dmalen", "reth_len", ""},
		{"infiniband.aeth.syndrome", "syndrome", ""},
		{"infiniband.aeth.msn", "msn", ""},
		{"infiniband.deth.q_key", "qkey", ""},
		{"infiniband.deth.srcqp", "src_qp", ""},
		{"infiniband.atomicacketh.origremdt", "orig", ""},
		{"infiniband.mad.transactionid", "cm_tid", ""},
		{"infiniband.cm.req", "cm_local_comm", "REQ"},
		{"infiniband.cm.req.serviceid", "cm_service_id", "REQ"},
		{"infiniband.cm.req.localqpn", "cm_local_qpn", "REQ"},
		{"infiniband.cm.req.startpsn", "cm_start_psn", "REQ"},
		{"infiniband.cm.req.responderres", "cm_resp_res", "REQ"},
		{"infiniband.cm.req.initdepth", "cm_init_depth", "REQ"},
		{"infiniband.cm.req.retrcount", "cm_retry", "REQ"},
		{"infiniband.cm.req.rnrretrcount", "cm_rnr_retry", "REQ"},
		{"infiniband.cm.rep", "cm_local_comm", "REP"},
		{"infiniband.cm.rep.remotecommid", "cm_remote_comm", "REP"},
		{"infiniband.cm.rep.localqpn", "cm_local_qpn", "REP"},
		{"infiniband.cm.rep.startpsn", "cm_start_psn", "REP"},
		{"infiniband.cm.rep.respres", "cm_resp_res", "REP"},
		{"infiniband.cm.rep.initdepth", "cm_init_depth", "REP"},
		{"infiniband.cm.rep.rnrretrcount", "cm_rnr_retry", "REP"},
		{"infiniband.cm.rtu.localcommid", "cm_local_comm", "RTU"},
		{"infiniband.cm.rtu.remotecommid", "cm_remote_comm", "RTU"},
		{"infiniband.cm.dreq.localcommid", "cm_local_comm", "DREQ"},
		{"infiniband.cm.dreq.remotecommid", "cm_remote_comm", "DREQ"},
		{"infiniband.cm.req.remoteqpneecn", "cm_remote_qpn", "DREQ"},
		{"infiniband.cm.drsp.localcommid", "cm_local_comm", "DREP"},
		{"infiniband.cm.drsp.remotecommid", "cm_remote_comm", "DREP"},
	}
	for _, name := range files {
		t.Run(filepath.Base(name), func(t *testing.T) {
			args := []string{"-n", "--disable-protocol", "rpcordma", "-r", name, "-Y", "infiniband", "-T", "fields", "-E", "separator=|"}
			for _, f := range fields {
				args = append(args, "-e", f.tshark)
			}
			cmd := exec.Command(tshark, args...)
			var tsErr bytes.Buffer
			cmd.Stderr = &tsErr
			tsOut, err := cmd.Output()
			require.NoError(t, err, tsErr.String())

			code, out, _ := runCmd(t, "decode", "--json", name)
			require.Equal(t, 0, code)
			var ours []map[string]any
			for _, o := range jsonLines(t, out) {
				if o["type"] == "packet" {
					ours = append(ours, o)
				}
			}
			theirs := lines(string(tsOut))
			require.Len(t, ours, len(theirs))
			for i, line := range theirs {
				vals := strings.Split(line, "|")
				require.Len(t, vals, len(fields), line)
				for j, f := range fields {
					if f.when != "" && ours[i]["cm"] != f.when {
						continue
					}
					tv := vals[j]
					ov, ok := ours[i][f.ours]
					if tv == "" {
						assert.False(t, ok, "frame %v: %s absent in tshark, ours %v", ours[i]["frame"], f.tshark, ov)
						continue
					}
					require.True(t, ok, "frame %v: no %s (tshark %s=%s)", ours[i]["frame"], f.ours, f.tshark, tv)
					assert.Equal(t, normTshark(tv), normOurs(ov), "frame %v field %s", ours[i]["frame"], f.tshark)
				}
			}
		})
	}
}

// normTshark and normOurs bring a value to a common form: integers in
// decimal, booleans as 0/1, times as printed.
func normTshark(v string) string {
	if strings.HasPrefix(v, "0x") {
		n, err := strconv.ParseUint(v[2:], 16, 64)
		if err == nil {
			return strconv.FormatUint(n, 10)
		}
	}
	switch v {
	case "True":
		return "1"
	case "False":
		return "0"
	}
	return v
}

func normOurs(v any) string {
	switch x := v.(type) {
	case bool:
		if x {
			return "1"
		}
		return "0"
	case float64:
		if x == float64(uint64(x)) {
			return strconv.FormatUint(uint64(x), 10)
		}
		return strconv.FormatFloat(x, 'f', 9, 64)
	case string:
		return normTshark(x)
	}
	return fmt.Sprint(v)
}

func TestDecodeErrors(t *testing.T) {
	code, _, errOut := runCmd(t, "decode")
	assert.Equal(t, exitTrouble, code)
	assert.Contains(t, errOut, "requires at least 1 arg")

	code, _, errOut = runCmd(t, "decode", "--bogus", "x")
	assert.Equal(t, exitTrouble, code)
	assert.Contains(t, errOut, "unknown flag")

	missing := filepath.Join(t.TempDir(), "missing.pcap")
	good := filepath.Join(rxeDir, "ud_pingpong.pcap")
	code, out, errOut := runCmd(t, "decode", missing, good)
	assert.Equal(t, exitTrouble, code)
	assert.Contains(t, errOut, "missing.pcap")
	assert.Contains(t, errOut, "1 of 2 files could not be read")
	assert.Contains(t, out, "# "+good+": frames=34 roce=10")

	code, out, _ = runCmd(t, "decode", "--json", missing)
	assert.Equal(t, exitTrouble, code)
	objs := jsonLines(t, out)
	require.Len(t, objs, 2)
	assert.Equal(t, "file", objs[0]["type"])
	assert.Contains(t, objs[0]["error"], "missing.pcap")
	assert.EqualValues(t, 1, objs[1]["unreadable"])

	// A capture cut in the middle of a packet: what was read is reported.
	b, err := os.ReadFile(good)
	require.NoError(t, err)
	cut := filepath.Join(t.TempDir(), "cut.pcap")
	require.NoError(t, os.WriteFile(cut, b[:len(b)-5], 0o644))
	code, out, errOut = runCmd(t, "decode", cut)
	assert.Equal(t, exitTrouble, code)
	assert.Contains(t, errOut, "after frame 33")
	assert.Contains(t, out, "# total: frames=33 ")

	// Not a capture at all.
	txt := filepath.Join(t.TempDir(), "x.txt")
	require.NoError(t, os.WriteFile(txt, []byte("hello world\n"), 0o644))
	code, _, errOut = runCmd(t, "decode", txt)
	assert.Equal(t, exitTrouble, code)
	assert.Contains(t, errOut, "not a pcap or pcapng file")
}

// TestDecodeAllocations checks that decode's own code does not allocate per
// packet: loss.pcap has 2653 frames, so a per-packet allocation would show.
// What packet's ICRC check allocates is measured separately and allowed
// for, as that is packet's business (and should become zero).
func TestDecodeAllocations(t *testing.T) {
	name := filepath.Join(rxeDir, "loss.pcap")
	data, err := os.ReadFile(name)
	require.NoError(t, err)
	var frames [][]byte
	r, err := pcapio.NewReader(bytes.NewReader(data))
	require.NoError(t, err)
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		frames = append(frames, append([]byte(nil), rec.Data...))
	}
	icrcAllocs := testing.AllocsPerRun(2, func() {
		var f packet.Frame
		for _, b := range frames {
			if packet.ParseFrame(b, &f) == nil {
				_ = f.ICRCOK()
			}
		}
	})
	for _, asJSON := range []bool{false, true} {
		allocs := testing.AllocsPerRun(2, func() {
			if err := runDecode(io.Discard, io.Discard, []string{name}, asJSON); err != nil {
				t.Fatal(err)
			}
		})
		assert.Less(t, allocs-icrcAllocs, 100.0, "json=%v: %v allocations, %v of them in ICRC checks", asJSON, allocs, icrcAllocs)
	}
}

func BenchmarkDecode(b *testing.B) {
	name := filepath.Join(rxeDir, "loss.pcap")
	st, err := os.Stat(name)
	require.NoError(b, err)
	for _, asJSON := range []bool{false, true} {
		b.Run(fmt.Sprintf("json=%v", asJSON), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(st.Size())
			w := bufio.NewWriter(io.Discard)
			for b.Loop() {
				if err := runDecode(w, io.Discard, []string{name}, asJSON); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
