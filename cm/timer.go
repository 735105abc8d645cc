package cm

import (
	"cmp"
	"slices"
)

// Deadline returns when Tick must next be called, if any timer runs.
func (m *Manager) Deadline() (Time, bool) {
	var first Time
	ok := false
	for _, c := range m.conns {
		if c.timer && (!ok || c.due < first) {
			first, ok = c.due, true
		}
	}
	return first, ok
}

// Tick runs the timers due at now: retransmissions, timeouts, timewait.
// Connections fire in deadline order, then by ID, so that a run is the
// same for the same inputs.
func (m *Manager) Tick(now Time) {
	due := m.scratch[:0]
	for _, c := range m.conns {
		if c.timer && c.due <= now {
			due = append(due, c)
		}
	}
	slices.SortFunc(due, func(a, b *conn) int {
		if a.due != b.due {
			return cmp.Compare(a.due, b.due)
		}
		return cmp.Compare(a.id, b.id)
	})
	for _, c := range due {
		if c.state == StateTimewait {
			m.free(c)
			if !c.orphan {
				m.emit(Event{Kind: EventTimewaitExit, Conn: c.id, Peer: c.peer})
			}
			continue
		}
		if c.left > 0 {
			c.left--
			c.due = now + c.every
			m.c.Retransmits++
			m.queue(c.peer, &c.pending)
			continue
		}
		c.disarm()
		m.c.Timeouts++
		m.timedOut(now, c)
	}
	clear(due)
	m.scratch = due[:0]
}

// timedOut ends an exchange whose retries ran out.
func (m *Manager) timedOut(now Time, c *conn) {
	switch c.state {
	case StateDreqSent:
		m.enterTimewait(now, c)
		m.emit(Event{Kind: EventDisconnected, Conn: c.id, Peer: c.peer, TimedOut: true})
	default:
		// REQ, REP or SIDR_REQ unanswered.
		m.free(c)
		m.emit(Event{Kind: EventUnreachable, Conn: c.id, Peer: c.peer})
	}
}

// enterTimewait starts timewait: the connection's ACK timeout, during which
// its remote QP stays known so a new REQ from it is refused as stale.
func (m *Manager) enterTimewait(now Time, c *conn) {
	c.state = StateTimewait
	c.timer, c.due, c.left = true, now+convert(c.timeoutExp), 0
}

// free forgets a connection.
func (m *Manager) free(c *conn) {
	if c.remoteIndexed {
		delete(m.byRemote, remoteKey{c.remoteID, c.remoteGUID})
	}
	if c.qpnIndexed {
		delete(m.byQPN, remoteKey{c.remoteQPN, c.remoteGUID})
	}
	if c.sidrKey != nil {
		delete(m.sidrs, *c.sidrKey)
	}
	delete(m.conns, c.id)
	c.state = StateIdle
	c.timer = false
}
