package rxe

import "github.com/softroce/softroce/qp"

// AsyncEvent is an asynchronous event (struct ibv_async_event): which
// object it concerns depends on Type.
type AsyncEvent struct {
	Type qp.EventType
	QP   *QP  // QP events
	CQ   *CQ  // EventCQErr
	SRQ  *SRQ // EventSRQLimitReached
}

// Events returns the channel asynchronous events arrive on. Events that find
// the channel full are dropped and counted (EventsDropped), so that the data
// path never blocks on a slow reader. The channel is made by the first call
// or the first event, whichever comes first: a device whose events nobody
// reads as they come (each host of a simulation, sixteen to hundreds a run)
// does not carry a buffer of 1,024 events.
func (d *Device) Events() <-chan AsyncEvent {
	if c := d.events.Load(); c != nil {
		return *c
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.eventChan()
}

// eventChan returns the event channel, making it if need be. Called with mu
// held.
func (d *Device) eventChan() chan AsyncEvent {
	if c := d.events.Load(); c != nil {
		return *c
	}
	c := make(chan AsyncEvent, eventQueueLen)
	d.events.Store(&c)
	return c
}

// DropEvents discards the events queued and returns how many there were,
// without making the channel when no event ever came: for an owner that
// does not read them as they come (the simulator, at the end of a run).
func (d *Device) DropEvents() int {
	c := d.events.Load()
	if c == nil {
		return 0
	}
	n := 0
	for {
		select {
		case <-*c:
			n++
		default:
			return n
		}
	}
}

// raise queues an event. Called with mu held.
func (d *Device) raise(e AsyncEvent) {
	select {
	case d.eventChan() <- e:
	default:
		d.cnt.EventsDropped++
	}
}
