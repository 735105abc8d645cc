package dropin

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/softroce/softroce/verbsapi"
)

// SysfsDir is where the server serving the socket at sock writes its
// device's sysfs view: the directory the drop-in's ibv_get_sysfs_path
// returns, holding class/infiniband/DEV and class/infiniband_verbs/uverbsN
// as the kernel's /sys does for rxe, and dev/infiniband/uverbsN as the
// mount points of the device files (see EnterView). The library derives the same
// name from the socket path.
func SysfsDir(sock string) string { return sock + ".sys" }

// WriteSysfs writes dev's sysfs view under dir (replacing what an earlier
// server left there). Middleware reads the files the kernel's ib_core
// writes for a device (UCX the GID types and their network devices, hwloc
// and Open MPI the class listing), so they carry the same text in the same
// format; what only a PCI device has (device/, local_cpus) is absent, as
// for rxe on a virtual interface.
func WriteSysfs(dir string, dev *verbsapi.Device) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("sysfs view %s: %w", dir, err)
	}
	files, err := sysfsFiles(dev)
	if err != nil {
		return fmt.Errorf("sysfs view %s: %w", dir, err)
	}
	// The view's staging mount point (see viewDev).
	if err := os.MkdirAll(filepath.Join(dir, "mnt"), 0o755); err != nil {
		return fmt.Errorf("sysfs view: %w", err)
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if strings.HasSuffix(name, "/") { // a directory
			if err := os.MkdirAll(p, 0o755); err != nil {
				return fmt.Errorf("sysfs view: %w", err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("sysfs view: %w", err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			return fmt.Errorf("sysfs view: %w", err)
		}
	}
	return nil
}

// sysfsFiles returns the view's files by path relative to its root (a name
// ending in / is a directory). Files under dev/ are empty: the view mounts
// /dev/null over them.
func sysfsFiles(dev *verbsapi.Device) (map[string]string, error) {
	ctx, err := dev.Open()
	if err != nil {
		return nil, err
	}
	defer ctx.Close()
	a := ctx.QueryDevice()
	pa, err := ctx.QueryPort(1)
	if err != nil {
		return nil, err
	}
	gids, err := ctx.QueryGIDTable(1)
	if err != nil {
		return nil, err
	}
	name := dev.Name()
	ib := "class/infiniband/" + name + "/"
	port := ib + "ports/1/"
	f := map[string]string{
		ib + "node_type":        "1: CA\n",
		ib + "node_guid":        guidText(a.NodeGUID) + "\n",
		ib + "sys_image_guid":   guidText(a.SysImageGUID) + "\n",
		ib + "fw_ver":           a.FWVer + "\n",
		ib + "node_desc":        name + "\n",
		port + "state":          portStateText(pa.State) + "\n",
		port + "phys_state":     "5: LinkUp\n",
		port + "link_layer":     "Ethernet\n",
		port + "cap_mask":       fmt.Sprintf("0x%08x\n", pa.PortCapFlags),
		port + "lid":            fmt.Sprintf("0x%x\n", pa.LID),
		port + "sm_lid":         fmt.Sprintf("0x%x\n", pa.SMLID),
		port + "lid_mask_count": fmt.Sprintf("%d\n", pa.LMC),
		port + "sm_sl":          fmt.Sprintf("%d\n", pa.SMSL),
		port + "pkeys/0":        "0xffff\n",

		"class/infiniband_verbs/abi_version":   "6\n",
		"class/infiniband_verbs/uverbs0/ibdev": name + "\n",
		// rxe's RXE_UVERBS_ABI_VERSION.
		"class/infiniband_verbs/uverbs0/abi_version": "2\n",
		"class/infiniband_verbs/uverbs0/dev":         "231:192\n",
		"dev/infiniband/uverbs0":                     "",
	}
	// The link-local GID, derived from the node GUID, belongs to the
	// network device of the others, as with rxe.
	ndev := "lo"
	for _, g := range gids {
		if !g.GID.Unmap().IsLinkLocalUnicast() {
			ndev, _ = netdevOf(g.GID)
			break
		}
	}
	for _, g := range gids {
		nd := ndev
		if !g.GID.Unmap().IsLinkLocalUnicast() {
			nd, _ = netdevOf(g.GID)
		}
		f[fmt.Sprintf("%sgids/%d", port, g.Index)] = gidText(g.GID) + "\n"
		f[fmt.Sprintf("%sgid_attrs/types/%d", port, g.Index)] = g.Type + "\n"
		f[fmt.Sprintf("%sgid_attrs/ndevs/%d", port, g.Index)] = nd + "\n"
	}
	// rxe's parent attribute: the network device it was added on.
	f[ib+"parent"] = ndev + "\n"
	// device/net/NDEV: rxe's device link leads to its network device's
	// parent, whose net/ lists it; pyverbs' rdmacm tests take their IP
	// address from there. Only a device whose address an interface really
	// holds has one: the mem link's would send them to the wrong address.
	if held := heldNetdev(gids); held != "" {
		f[ib+"device/net/"+held+"/"] = ""
	}
	return f, nil
}

// guidText formats a GUID as sysfs does: four groups of four hex digits.
func guidText(g uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], g)
	return fmt.Sprintf("%02x%02x:%02x%02x:%02x%02x:%02x%02x", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7])
}

// gidText formats a GID as ib_core's show_port_gid: eight groups of four
// hex digits, no shortening.
func gidText(g netip.Addr) string {
	b := g.As16()
	parts := make([]string, 8)
	for i := range parts {
		parts[i] = fmt.Sprintf("%02x%02x", b[2*i], b[2*i+1])
	}
	return strings.Join(parts, ":")
}

func portStateText(s int) string {
	switch s {
	case 1:
		return "1: DOWN"
	case 2:
		return "2: INIT"
	case 3:
		return "3: ARMED"
	case 4:
		return "4: ACTIVE"
	}
	return fmt.Sprintf("%d: NOP", s)
}

// heldNetdev names the interface holding the first of gids that is not
// link-local, or "" when no interface holds it.
func heldNetdev(gids []verbsapi.GIDEntry) string {
	for _, g := range gids {
		if a := g.GID.Unmap(); !a.IsLinkLocalUnicast() {
			nd, held := netdevOf(a)
			if !held {
				return ""
			}
			return nd
		}
	}
	return ""
}

// netdevOf names the network interface that holds addr (an IPv4-mapped or
// IPv6 GID), and whether one does. An address no interface holds (the mem
// link's) is given "lo": middleware only checks that the device named
// exists and is up.
func netdevOf(gid netip.Addr) (string, bool) {
	addr := gid.Unmap()
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == addr {
					return ifc.Name, true
				}
			}
		}
	}
	return "lo", false
}
