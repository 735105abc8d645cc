package verbsapi

import "github.com/softroce/softroce/rxe"

// The device's attribute values, re-exported so that a program reading
// QueryDevice and QueryPort (as ibv_devinfo does) needs no other import.
const (
	// Port states (enum ibv_port_state, PortAttr.State).
	PortDown   = rxe.PortDown
	PortInit   = rxe.PortInit
	PortArmed  = rxe.PortArmed
	PortActive = rxe.PortActive

	// LinkLayerEthernet is PortAttr.LinkLayer on RoCE (IBV_LINK_LAYER_ETHERNET).
	LinkLayerEthernet = rxe.LinkLayerEthernet
	// PortCapCMSup is IBV_PORT_CM_SUP in PortAttr.PortCapFlags.
	PortCapCMSup = rxe.PortCapCMSup

	// Atomic capabilities (enum ibv_atomic_cap, DeviceAttr.AtomicCap).
	AtomicNone = rxe.AtomicNone
	AtomicHCA  = rxe.AtomicHCA
	AtomicGlob = rxe.AtomicGlob

	// Device capability flags (enum ibv_device_cap_flags,
	// DeviceAttr.DeviceCapFlags).
	DevCapBadPKeyCntr      = rxe.DevCapBadPKeyCntr
	DevCapBadQKeyCntr      = rxe.DevCapBadQKeyCntr
	DevCapAutoPathMig      = rxe.DevCapAutoPathMig
	DevCapChangePhyPort    = rxe.DevCapChangePhyPort
	DevCapUDAVPortEnforce  = rxe.DevCapUDAVPortEnforce
	DevCapPortActiveEvent  = rxe.DevCapPortActiveEvent
	DevCapSysImageGUID     = rxe.DevCapSysImageGUID
	DevCapRCRNRNAKGen      = rxe.DevCapRCRNRNAKGen
	DevCapSRQResize        = rxe.DevCapSRQResize
	DevCapMemWindow        = rxe.DevCapMemWindow
	DevCapMemMgtExtensions = rxe.DevCapMemMgtExtensions
	DevCapMemWindowType2B  = rxe.DevCapMemWindowType2B
)

// Resources is a listing of what a device holds (rdma resource show).
type Resources = rxe.Resources

// Resources lists what the device holds, over all contexts.
func (c *Context) Resources() Resources { return c.dev.Resources() }
