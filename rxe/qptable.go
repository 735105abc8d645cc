package rxe

// qpTable finds a QP by number, as rxe's xarray of QPs does: every packet
// received names its QP, so the lookup is on the receive path of every
// frame. QPNs are handed out in order (allocQPN), so the live ones sit
// close together: a table of chunks indexed by QPN finds a QP in two loads
// from memory that stays in cache, where a map hashed and probed a group
// that, with a thousand QPs in a simulation, was often not.
type qpTable struct {
	chunks []*[qpChunk]*QP // chunk i holds QPNs i*qpChunk ..; nil when never used
	n      int
}

const qpChunkBits = 10

const qpChunk = 1 << qpChunkBits

// get returns QP qpn, or nil. qpn comes from the wire: any 24-bit value.
func (t *qpTable) get(qpn uint32) *QP {
	if i := qpn >> qpChunkBits; i < uint32(len(t.chunks)) {
		if c := t.chunks[i]; c != nil {
			return c[qpn&(qpChunk-1)]
		}
	}
	return nil
}

// put records x as QP qpn, which is free.
func (t *qpTable) put(qpn uint32, x *QP) {
	i := int(qpn >> qpChunkBits)
	for len(t.chunks) <= i {
		t.chunks = append(t.chunks, nil)
	}
	if t.chunks[i] == nil {
		t.chunks[i] = new([qpChunk]*QP)
	}
	t.chunks[i][qpn&(qpChunk-1)] = x
	t.n++
}

// remove forgets QP qpn, which is in the table. A chunk stays once made: at
// most 8 KiB for every 1,024 QPNs the device has handed out.
func (t *qpTable) remove(qpn uint32) {
	t.chunks[qpn>>qpChunkBits][qpn&(qpChunk-1)] = nil
	t.n--
}

// len returns how many QPs the table holds.
func (t *qpTable) len() int { return t.n }
