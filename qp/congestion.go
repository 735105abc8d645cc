package qp

// Congestion control in the engine follows the three roles of RoCE's DCQCN
// (IBTA Annex A17.9): a switch marks packets CE (the congestion point), the
// receiving QP answers marks with CNPs (the notification point, np.go),
// and the sending QP's rate control cuts and recovers its rate from them
// (the reaction point, dcqcn.go), which a pacer (pace.go) holds the
// requester to. Everything runs on the caller's clock, so the same control
// loop runs in real time and, exactly, in virtual time.

// Congestion configures a device's congestion control; the device's QPs
// share one and read it on every use, so a change applies at once (as
// mlx5's cc_params do). Zero values of the DCQCN parameters take mlx5's
// defaults.
type Congestion struct {
	// NP turns on the notification point: a CE-marked packet makes the QP
	// send a CNP to the QP that sent it, at most one per MinTimeBetweenCNPs.
	NP bool
	// MinTimeBetweenCNPs is mlx5's np_min_time_between_cnps.
	MinTimeBetweenCNPs Time
	// RP turns on the reaction point: CNPs cut the QP's sending rate.
	RP bool
	// LineRate is the port's rate in bit/s, where rate control starts and
	// which it never exceeds.
	LineRate int64
	// Burst is how far ahead of its paced slot the requester may send,
	// and how much credit an idle spell leaves: 0 paces every packet
	// exactly (the simulator); a real clock's timers wake up to a
	// millisecond late, so a real link lets that much go early and the
	// average still holds.
	Burst Time
	// DCQCN holds the reaction point's parameters.
	DCQCN DCQCNParams
	// NewRateControl, when set, makes the reaction point's algorithm for a
	// QP instead of DCQCN: the room left for HPCC, Timely or Swift.
	NewRateControl func(c *Congestion, now Time) RateControl
}

// DefaultMinTimeBetweenCNPs is mlx5's np_min_time_between_cnps as NVIDIA
// documents it for current ConnectX and BlueField (4 us; older firmware
// dumps show 2).
const DefaultMinTimeBetweenCNPs = 4 * Microsecond

// Units of Time.
const (
	Microsecond Time = 1000
	Millisecond Time = 1_000_000
	Second      Time = 1_000_000_000
)

// RateControl is a reaction point's algorithm: it decides a QP's sending
// rate from the congestion signals the QP sees. The QP calls it with the
// time of each event; it never reads a clock.
type RateControl interface {
	// CNP reports a congestion notification for the QP.
	CNP(now Time)
	// Sent reports a request packet of n bytes on the wire.
	Sent(now Time, n int)
	// Tick runs the algorithm's timers due at now.
	Tick(now Time)
	// Deadline returns when Tick is next due, or Never.
	Deadline() Time
	// Rate returns the current rate in bit/s.
	Rate() int64
	// Idle reports whether the algorithm is back at line rate with no
	// timer running: the QP then drops it until the next CNP.
	Idle() bool
	// State reports the algorithm's variables, for traces and reports.
	State() RateState
}

// newRateControl makes the reaction point's algorithm for a QP.
func (c *Congestion) newRateControl(now Time) RateControl {
	if c.NewRateControl != nil {
		return c.NewRateControl(c, now)
	}
	return newDCQCN(&c.DCQCN, c.LineRate, now)
}
