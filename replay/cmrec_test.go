package replay

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/packet"
)

// TestCheckCM: a flow connected with rdma_cm (ucmatose between two kernel
// rxe guests) has its REQ and REP checked against its packets, as
// out-of-band records are; a record that contradicts the flow is said.
func TestCheckCM(t *testing.T) {
	c, err := Load("../testdata/pcaps/interop/guest_guest_ucmatose.pcap")
	require.NoError(t, err)
	require.Len(t, c.CM, 4, "two connections: a REQ and a REP each")
	flows := c.Flows()
	require.Len(t, flows, 2)
	for i, f := range flows {
		recs, err := c.CheckCM(f)
		require.NoError(t, err, "flow %d", i+1)
		require.Len(t, recs, 2, "flow %d: its REQ and its REP", i+1)
		assert.Equal(t, packet.CMAttrREQ, recs[0].Kind)
		assert.Equal(t, 4096, recs[0].MTU)
		assert.Equal(t, packet.CMAttrREP, recs[1].Kind)
		assert.Equal(t, recs[0].From, f.Frames[0].Dst, "flow %d: the passive side sends first; the REQ came from the other", i+1)
	}

	c.CM[0].PSN ^= 1
	_, err = c.CheckCM(flows[0])
	require.ErrorContains(t, err, "the first request of")
	c.CM[0].PSN ^= 1
	longest := 0
	for _, fr := range flows[0].Frames {
		longest = max(longest, len(fr.Pkt.Payload))
	}
	require.Positive(t, longest)
	c.CM[0].MTU = longest - 1
	_, err = c.CheckCM(flows[0])
	require.ErrorContains(t, err, "more than the path MTU")
}

// TestCMRecordsTshark: the REQ and REP fields replay reads (frame, QPN,
// starting PSN) are the ones Wireshark's dissector shows.
func TestCMRecordsTshark(t *testing.T) {
	testenv.Tools(t, "apt-get install tshark", "tshark")
	const path = "../testdata/pcaps/interop/guest_guest_ucmatose.pcap"
	c, err := Load(path)
	require.NoError(t, err)
	out, err := exec.Command("tshark", "-r", path, "-Y", "infiniband.cm.req.localqpn || infiniband.cm.rep.localqpn",
		"-T", "fields", "-E", "separator=|", "-e", "frame.number",
		"-e", "infiniband.cm.req.localqpn", "-e", "infiniband.cm.req.startpsn",
		"-e", "infiniband.cm.rep.localqpn", "-e", "infiniband.cm.rep.startpsn").Output()
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, len(c.CM))
	for i, l := range lines {
		f := strings.Split(l, "|")
		require.Len(t, f, 5, l)
		qpn, psn := f[1]+f[3], f[2]+f[4] // one of the pairs is empty
		r := c.CM[i]
		assert.Equal(t, strconv.Itoa(r.No), f[0])
		assert.Equal(t, fmt.Sprintf("0x%06x", r.QPN), qpn, "frame %s", f[0])
		assert.Equal(t, fmt.Sprintf("0x%06x", r.PSN), psn, "frame %s", f[0])
	}
}
