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
// path never blocks on a slow reader.
func (d *Device) Events() <-chan AsyncEvent { return d.events }

// raise queues an event. Called with mu held.
func (d *Device) raise(e AsyncEvent) {
	select {
	case d.events <- e:
	default:
		d.cnt.EventsDropped++
	}
}
