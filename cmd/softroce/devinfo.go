package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/softroce/softroce/verbsapi"
)

func init() { register(newDevinfoCmd) }

func newDevinfoCmd() *cobra.Command {
	var (
		verbose    bool
		name       string
		congestion bool
	)
	cmd := &cobra.Command{
		Use:   "devinfo",
		Short: "Start a device and print its attributes, as ibv_devinfo does",
		Long: `devinfo starts a softroce device on the link the flags describe and prints
what ibv_devinfo prints for an rxe device: the device's identity, and for its
one port the state, MTUs, LIDs (all 0 on RoCE) and link layer. -v adds the
device limits (ibv_query_device), the port's remaining attributes and the GID
table, each GID with its type (softroce speaks RoCE v2 only).

With the defaults (--link mem --addr 10.0.0.1) it needs no privileges and no
network; --link udp --addr 127.0.0.2 runs the device on a kernel UDP socket.

--congestion prints the congestion control settings under the names of
mlx5's cc_params (and the ecn/roce_np, roce_rp enables), as --dcqcn and
--cc set them, and the congestion counters under mlx5's hw_counters names.`,
		Example: `  softroce devinfo
  softroce devinfo -v --link udp --addr 127.0.0.2
  softroce devinfo --mtu 9000 -d rxe1
  softroce devinfo --congestion --dcqcn --cc rp_ai_rate=20`,
		Args: cobra.NoArgs,
	}
	lf := addLinkFlags(cmd, linkFlags{Link: "mem", Addr: "10.0.0.1"})
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "print the device limits, every port attribute and the GID table")
	cmd.Flags().StringVarP(&name, "ib-dev", "d", "rxe0", "device name")
	cmd.Flags().BoolVar(&congestion, "congestion", false, "print the congestion control settings and counters")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx, closeDev, err := openDevice(*lf, name)
		if err != nil {
			return exitError{exitTrouble, err}
		}
		err = writeDevinfo(cmd.OutOrStdout(), ctx, verbose)
		if err == nil && congestion {
			err = writeCongestion(cmd.OutOrStdout(), ctx)
		}
		if cerr := closeDev(); err == nil {
			err = cerr
		}
		if err != nil {
			return exitError{exitTrouble, err}
		}
		return nil
	}
	return cmd
}

// writeDevinfo prints ctx's device as ibv_devinfo (-v) does.
func writeDevinfo(out io.Writer, ctx *verbsapi.Context, verbose bool) error {
	a := ctx.QueryDevice()
	p, err := ctx.QueryPort(1)
	if err != nil {
		return err
	}
	w := &strings.Builder{}
	fmt.Fprintf(w, "hca_id:\t%s\n", ctx.Name())
	field(w, 1, "transport", "InfiniBand (0)")
	field(w, 1, "fw_ver", "%s", a.FWVer)
	field(w, 1, "node_guid", "%s", guidString(a.NodeGUID))
	field(w, 1, "sys_image_guid", "%s", guidString(a.SysImageGUID))
	field(w, 1, "vendor_id", "0x%04x", a.VendorID)
	field(w, 1, "vendor_part_id", "%d", a.VendorPartID)
	field(w, 1, "hw_ver", "0x%X", a.HWVer)
	field(w, 1, "phys_port_cnt", "%d", a.PhysPortCnt)
	if verbose {
		writeDeviceLimits(w, &a)
	}
	fmt.Fprintf(w, "\t\tport:\t%d\n", 1)
	field(w, 3, "state", "%s (%d)", portStateName(p.State), p.State)
	field(w, 3, "max_mtu", "%d (%d)", p.MaxMTU, p.MaxMTU.Enum())
	field(w, 3, "active_mtu", "%d (%d)", p.ActiveMTU, p.ActiveMTU.Enum())
	field(w, 3, "sm_lid", "%d", p.SMLID)
	field(w, 3, "port_lid", "%d", p.LID)
	field(w, 3, "port_lmc", "0x%02x", p.LMC)
	field(w, 3, "link_layer", "%s", linkLayerName(p.LinkLayer))
	if verbose {
		field(w, 3, "max_msg_sz", "0x%x", p.MaxMsgSz)
		field(w, 3, "port_cap_flags", "0x%08x", p.PortCapFlags)
		field(w, 3, "port_cap_flags2", "0x%04x", 0)
		field(w, 3, "max_vl_num", "%d (%d)", p.MaxVLNum, p.MaxVLNum)
		field(w, 3, "bad_pkey_cntr", "0x%x", p.BadPKeyCntr)
		field(w, 3, "qkey_viol_cntr", "0x%x", p.QKeyViolCntr)
		field(w, 3, "sm_sl", "%d", p.SMSL)
		field(w, 3, "pkey_tbl_len", "%d", p.PKeyTblLen)
		field(w, 3, "gid_tbl_len", "%d", p.GIDTblLen)
		field(w, 3, "subnet_timeout", "%d", p.SubnetTimeout)
		field(w, 3, "init_type_reply", "%d", p.InitTypeReply)
		field(w, 3, "active_width", "%s (%d)", widthName(p.ActiveWidth), p.ActiveWidth)
		field(w, 3, "active_speed", "%s (%d)", speedName(p.ActiveSpeed), p.ActiveSpeed)
		field(w, 3, "phys_state", "%s (%d)", physStateName(p.PhysState), p.PhysState)
		gids, err := ctx.QueryGIDTable(1)
		if err != nil {
			return err
		}
		for _, g := range gids {
			field(w, 3, fmt.Sprintf("GID[%3d]", g.Index), "%s, %s", g.GID, g.Type)
		}
	}
	fmt.Fprintln(w)
	_, err = io.WriteString(out, w.String())
	return err
}

func writeDeviceLimits(w io.Writer, a *verbsapi.DeviceAttr) {
	rows := []struct {
		name string
		val  string
	}{
		{"max_mr_size", fmt.Sprintf("0x%x", a.MaxMRSize)},
		{"page_size_cap", fmt.Sprintf("0x%x", a.PageSizeCap)},
		{"max_qp", fmt.Sprint(a.MaxQP)},
		{"max_qp_wr", fmt.Sprint(a.MaxQPWR)},
		{"device_cap_flags", fmt.Sprintf("0x%08x", a.DeviceCapFlags)},
		{"max_sge", fmt.Sprint(a.MaxSGE)},
		{"max_sge_rd", fmt.Sprint(a.MaxSGERd)},
		{"max_cq", fmt.Sprint(a.MaxCQ)},
		{"max_cqe", fmt.Sprint(a.MaxCQE)},
		{"max_mr", fmt.Sprint(a.MaxMR)},
		{"max_pd", fmt.Sprint(a.MaxPD)},
		{"max_qp_rd_atom", fmt.Sprint(a.MaxQPRdAtom)},
		{"max_ee_rd_atom", fmt.Sprint(a.MaxEECRdAtom)},
		{"max_res_rd_atom", fmt.Sprint(a.MaxResRdAtom)},
		{"max_qp_init_rd_atom", fmt.Sprint(a.MaxQPInitRdAtom)},
		{"max_ee_init_rd_atom", fmt.Sprint(a.MaxEECInitRdAtom)},
		{"atomic_cap", fmt.Sprintf("%s (%d)", atomicCapName(a.AtomicCap), a.AtomicCap)},
		{"max_ee", fmt.Sprint(a.MaxEE)},
		{"max_rdd", fmt.Sprint(a.MaxRDD)},
		{"max_mw", fmt.Sprint(a.MaxMW)},
		{"max_raw_ipv6_qp", fmt.Sprint(a.MaxRawIPv6QP)},
		{"max_raw_ethy_qp", fmt.Sprint(a.MaxRawEthyQP)},
		{"max_mcast_grp", fmt.Sprint(a.MaxMcastGrp)},
		{"max_mcast_qp_attach", fmt.Sprint(a.MaxMcastQPAttach)},
		{"max_total_mcast_qp_attach", fmt.Sprint(a.MaxTotalMcastQPAttach)},
		{"max_ah", fmt.Sprint(a.MaxAH)},
		{"max_fmr", fmt.Sprint(a.MaxFMR)},
		{"max_srq", fmt.Sprint(a.MaxSRQ)},
		{"max_srq_wr", fmt.Sprint(a.MaxSRQWR)},
		{"max_srq_sge", fmt.Sprint(a.MaxSRQSGE)},
		{"max_pkeys", fmt.Sprint(a.MaxPKeys)},
		{"local_ca_ack_delay", fmt.Sprint(a.LocalCAAckDelay)},
		{"max_inline_data", fmt.Sprint(a.MaxInlineData)},
	}
	for _, r := range rows {
		field(w, 1, r.name, "%s", r.val)
	}
}

// field writes one "name: value" line as ibv_devinfo does: indent tabs,
// the name and a colon, then tabs up to column 40 (device lines) or 48
// (port lines), at least one.
func field(w io.Writer, indent int, name, format string, args ...any) {
	var b strings.Builder
	b.WriteString(strings.Repeat("\t", indent))
	b.WriteString(name)
	b.WriteByte(':')
	col := 8*indent + len(name) + 1
	target := 40
	if indent > 1 {
		target = 48
	}
	for first := true; first || col < target; first = false {
		b.WriteByte('\t')
		col = (col/8 + 1) * 8
	}
	fmt.Fprintf(&b, format, args...)
	b.WriteByte('\n')
	io.WriteString(w, b.String())
}

// guidString writes a GUID as ibv_devinfo does: four groups of four hex
// digits.
func guidString(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

func portStateName(s int) string {
	switch s {
	case 0:
		return "PORT_NOP"
	case verbsapi.PortDown:
		return "PORT_DOWN"
	case verbsapi.PortInit:
		return "PORT_INIT"
	case verbsapi.PortArmed:
		return "PORT_ARMED"
	case verbsapi.PortActive:
		return "PORT_ACTIVE"
	case 5:
		return "PORT_ACTIVE_DEFER"
	}
	return "invalid state"
}

func linkLayerName(l uint8) string {
	switch l {
	case 1:
		return "InfiniBand"
	case verbsapi.LinkLayerEthernet:
		return "Ethernet"
	}
	return "Unknown"
}

func atomicCapName(c int) string {
	switch c {
	case verbsapi.AtomicNone:
		return "ATOMIC_NONE"
	case verbsapi.AtomicHCA:
		return "ATOMIC_HCA"
	case verbsapi.AtomicGlob:
		return "ATOMIC_GLOB"
	}
	return "invalid atomic capability"
}

func widthName(w uint8) string {
	switch w {
	case 1:
		return "1X"
	case 2:
		return "4X"
	case 4:
		return "8X"
	case 8:
		return "12X"
	case 16:
		return "2X"
	}
	return "invalid width"
}

func speedName(s uint8) string {
	switch s {
	case 1:
		return "2.5 Gbps"
	case 2:
		return "5.0 Gbps"
	case 4, 8:
		return "10.0 Gbps"
	case 16:
		return "14.0 Gbps"
	case 32:
		return "25.0 Gbps"
	case 64:
		return "50.0 Gbps"
	case 128:
		return "100.0 Gbps"
	}
	return "invalid speed"
}

func physStateName(s uint8) string {
	names := map[uint8]string{1: "SLEEP", 2: "POLLING", 3: "DISABLED", 4: "PORT_CONFIGURATION TRAINNING",
		5: "LINK_UP", 6: "LINK_ERROR_RECOVERY", 7: "PHY TEST"}
	if n, ok := names[s]; ok {
		return n
	}
	return "invalid physical state"
}

// writeCongestion prints the device's congestion control settings (name,
// value, unit) and its congestion counters.
func writeCongestion(out io.Writer, ctx *verbsapi.Context) error {
	w := &strings.Builder{}
	cc := ctx.Device().Congestion()
	fmt.Fprintln(w, "congestion control (mlx5 cc_params names):")
	for _, p := range cc.Params() {
		field(w, 1, p[0], "%s", strings.TrimSpace(p[1]+" "+p[2]))
	}
	fmt.Fprintln(w, "congestion counters:")
	c := ctx.Counters()
	for _, kv := range c.List() {
		if strings.HasPrefix(kv.Name, "np_") || strings.HasPrefix(kv.Name, "rp_") || kv.Name == "rx_cnp" {
			field(w, 1, kv.Name, "%d", kv.Value)
		}
	}
	_, err := io.WriteString(out, w.String())
	return err
}
