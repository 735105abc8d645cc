package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// devinfoFields parses "name:<tabs>value" lines into a map (the last
// occurrence wins) and keeps the raw lines.
func devinfoFields(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		name, val, ok := strings.Cut(strings.TrimLeft(l, "\t"), ":")
		if ok {
			m[name] = strings.TrimLeft(val, "\t")
		}
	}
	return m
}

func TestDevinfo(t *testing.T) {
	code, out, errOut := runCmd(t, "devinfo")
	require.Equal(t, exitOK, code, errOut)
	f := devinfoFields(out)
	want := map[string]string{
		"hca_id":         "rxe0",
		"transport":      "InfiniBand (0)",
		"fw_ver":         "softroce",
		"vendor_id":      "0xffffff",
		"vendor_part_id": "0",
		"hw_ver":         "0x0",
		"phys_port_cnt":  "1",
		"port":           "1",
		"state":          "PORT_ACTIVE (4)",
		"max_mtu":        "4096 (5)",
		"active_mtu":     "1024 (3)",
		"sm_lid":         "0",
		"port_lid":       "0",
		"port_lmc":       "0x00",
		"link_layer":     "Ethernet",
	}
	for k, v := range want {
		assert.Equal(t, v, f[k], k)
	}
	// The mem link's first end has MAC 02:00:00:00:00:01: its EUI-64.
	assert.Equal(t, "0000:00ff:fe00:0001", f["node_guid"])
	assert.Equal(t, f["node_guid"], f["sys_image_guid"])
	assert.NotContains(t, out, "max_qp", "limits only with -v")
	assert.NotContains(t, out, "GID[")
	// The layout is ibv_devinfo's: tabs to column 40 (device) and 48 (port).
	for _, l := range []string{
		"hca_id:\trxe0\n",
		"\ttransport:\t\t\tInfiniBand (0)\n",
		"\tfw_ver:\t\t\t\tsoftroce\n",
		"\tvendor_part_id:\t\t\t0\n",
		"\t\tport:\t1\n",
		"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n",
		"\t\t\tmax_mtu:\t\t4096 (5)\n",
		"\t\t\tport_lmc:\t\t0x00\n",
	} {
		assert.Contains(t, out, l)
	}
}

func TestDevinfoVerbose(t *testing.T) {
	code, out, errOut := runCmd(t, "devinfo", "-v", "--addr", "10.1.2.3")
	require.Equal(t, exitOK, code, errOut)
	f := devinfoFields(out)
	want := map[string]string{
		"max_qp":              "1048560",
		"max_qp_wr":           "1048576",
		"max_cqe":             "32767",
		"max_mr":              "524287",
		"max_sge":             "32",
		"atomic_cap":          "ATOMIC_HCA (1)",
		"max_qp_rd_atom":      "128",
		"max_qp_init_rd_atom": "128",
		"max_srq_sge":         "27",
		"max_pkeys":           "64",
		"local_ca_ack_delay":  "15",
		"gid_tbl_len":         "1024",
		"pkey_tbl_len":        "1",
		"max_msg_sz":          "0x800000",
		"port_cap_flags":      "0x00010000",
		"active_width":        "4X (2)",
		"phys_state":          "LINK_UP (5)",
	}
	for k, v := range want {
		assert.Equal(t, v, f[k], k)
	}
	assert.Contains(t, out, "\tmax_total_mcast_qp_attach:\t0\n", "no multicast yet: zero groups, as a device without it reports")
	assert.Regexp(t, `(?m)^\t\t\tGID\[  0\]:\t\tfe80::[0-9a-f:]+, RoCE v2$`, out)
	assert.Contains(t, out, "\t\t\tGID[  1]:\t\t::ffff:10.1.2.3, RoCE v2\n")
	assert.NotContains(t, out, "GID[  2]")
}

func TestDevinfoLinks(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"jumbo mtu", []string{"--mtu", "9000"}, []string{"active_mtu:\t\t4096 (5)"}},
		{"small mtu", []string{"--mtu", "1100"}, []string{"active_mtu:\t\t512 (2)"}},
		{"ipv6", []string{"-v", "--addr", "fd00::5"}, []string{"GID[  1]:\t\tfd00::5, RoCE v2"}},
		{"name", []string{"-d", "rxe7"}, []string{"hca_id:\trxe7\n"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := runCmd(t, append([]string{"devinfo"}, c.args...)...)
			require.Equal(t, exitOK, code, errOut)
			for _, w := range c.want {
				assert.Contains(t, out, w)
			}
		})
	}
}

// A device on a kernel UDP socket on a loopback address needs no privileges.
func TestDevinfoUDP(t *testing.T) {
	code, out, errOut := runCmd(t, "devinfo", "-v", "--link", "udp", "--addr", "127.0.0.2:47911")
	if code != exitOK && regexp.MustCompile(`address already in use|cannot assign`).MatchString(errOut) {
		t.Skipf("cannot bind 127.0.0.2:47911: %s", errOut)
	}
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "GID[  1]:\t\t::ffff:127.0.0.2, RoCE v2")
	assert.Contains(t, out, "active_mtu:\t\t1024 (3)")
}

func TestDevinfoErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--link", "carrier-pigeon"}, `--link "carrier-pigeon"`},
		{[]string{"--addr", "not-an-ip"}, "--addr"},
		{[]string{"--addr", ""}, "--addr is required"},
		{[]string{"--fault", "loss=lots"}, "--fault"},
		{[]string{"--mtu", "200"}, "MTU"},
	} {
		code, _, errOut := runCmd(t, append([]string{"devinfo"}, c.args...)...)
		assert.Equal(t, exitTrouble, code, "%v", c.args)
		assert.Contains(t, errOut, c.msg, "%v", c.args)
	}
}

// TestDevinfoCongestion: --dcqcn and --cc reach the device, devinfo
// --congestion lists the settings under mlx5's names and the counters, and
// a bad setting is refused with the names that exist.
func TestDevinfoCongestion(t *testing.T) {
	code, out, errOut := runCmd(t, "devinfo", "--congestion", "--dcqcn", "--cc", "rp_ai_rate=20", "--cc", "np_min_time_between_cnps=2")
	require.Equal(t, 0, code, errOut)
	for _, want := range []string{"roce_np:", "roce_rp:", "ecn:", "rp_ai_rate:", "np_cnp_sent:", "rp_cnp_ignored:"} {
		assert.Contains(t, out, want)
	}
	field := func(name string) string {
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == name+":" {
				return strings.Join(f[1:], " ")
			}
		}
		return ""
	}
	assert.Equal(t, "1", field("roce_rp"))
	assert.Equal(t, "20 Mbps", field("rp_ai_rate"))
	assert.Equal(t, "2 us", field("np_min_time_between_cnps"))
	assert.Equal(t, "1000 us", field("pace_burst"), "real links pace with a 1 ms burst")

	code, _, errOut = runCmd(t, "devinfo", "--cc", "rp_ia_rate=20")
	assert.Equal(t, exitTrouble, code)
	assert.Contains(t, errOut, "--cc")
	assert.Contains(t, errOut, "rp_ai_rate", "the error lists the names")
}
