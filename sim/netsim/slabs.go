package netsim

import "github.com/softroce/softroce/internal/bytepool"

// Frame-buffer slabs outlive the network that made them when its user says
// it is done (Release), for the next network (package bytepool says why).

// slabPool is the slabs networks gave back: 32 MiB at most.
var slabPool = bytepool.Pool{Keep: 32 << 20}

// newSlabData returns the zeroed bytes of a slab of class c.
func newSlabData(c int) []byte { return slabPool.Get(slabSlots * c * bufClass) }

// Release gives the network's frame buffers back for later networks. The
// network must not be used afterwards; nothing it handed out (a frame a
// node received) may be read either.
func (n *Network) Release() {
	for _, sh := range n.shards {
		for k := range int(sh.nslabs) {
			s := &sh.chunks[k/chunkSlabs][k%chunkSlabs]
			if s.data != nil {
				slabPool.Put(s.data)
			}
			s.data = nil
		}
		sh.chunks = [maxChunks]*[chunkSlabs]slab{}
		sh.nslabs = 0
		sh.freeBufs, sh.newSlab = nil, nil
	}
}
