package netsim

import "sync"

// Frame-buffer slabs outlive the network that made them when its user says
// it is done (Release): a search or a sweep builds a network per run, and
// thousands of runs in one process would otherwise allocate their frame
// buffers afresh each time, setting the garbage collector's pace with bytes
// that hold no pointers.

// slabKeep bounds the bytes of slabs kept between networks.
const slabKeep = 32 << 20

// slabFree is the slabs networks gave back, by capacity class.
var slabFree struct {
	sync.Mutex
	byClass map[int][][]byte
	bytes   int
}

// newSlabData returns the bytes of a slab of class c: a released one,
// cleared, or new ones.
func newSlabData(c int) []byte {
	var d []byte
	slabFree.Lock()
	if l := slabFree.byClass[c]; len(l) > 0 {
		d = l[len(l)-1]
		l[len(l)-1] = nil
		slabFree.byClass[c] = l[:len(l)-1]
		slabFree.bytes -= len(d)
	}
	slabFree.Unlock()
	if d == nil {
		return make([]byte, slabSlots*c*bufClass)
	}
	clear(d)
	return d
}

// Release gives the network's frame buffers back for later networks. The
// network must not be used afterwards; nothing it handed out (a frame a
// node received) may be read either.
func (n *Network) Release() {
	slabFree.Lock()
	defer slabFree.Unlock()
	if slabFree.byClass == nil {
		slabFree.byClass = map[int][][]byte{}
	}
	for _, sh := range n.shards {
		for k := range int(sh.nslabs) {
			s := &sh.chunks[k/chunkSlabs][k%chunkSlabs]
			if s.data != nil && slabFree.bytes+len(s.data) <= slabKeep {
				c := s.size / bufClass
				slabFree.byClass[c] = append(slabFree.byClass[c], s.data)
				slabFree.bytes += len(s.data)
			}
			s.data = nil
		}
		sh.chunks = [maxChunks]*[chunkSlabs]slab{}
		sh.nslabs = 0
		sh.freeBufs, sh.newSlab = nil, nil
	}
}
