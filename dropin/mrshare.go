package dropin

// mrshare.go: regions that share the daemon's mapping of pages it holds
// already. Each mapping costs one of the kernel's vm.max_map_count per
// piece, and a program that registers many regions in one buffer (the
// same buffer again, its parts one by one, as UCX's and MPI's registration
// caches do) would otherwise use up the daemon's mappings, everyone's, long
// before the device's max_mr. A new region whose every piece lies inside a
// mapping of the same program, from the same file at the same offset, is a
// view of that mapping; the mapping goes when its last view does.

import (
	"golang.org/x/sys/unix"
)

// shareRegion returns a view of one of c's mappings that holds exactly the
// pages r's pieces name, or nil. Pieces and fds have passed checkPieces.
// Called with c.mu held.
func (c *conn) shareRegion(r *wireRegMR, pieces []wireMRPiece, fds []int) *mrMapping {
	if len(c.regions) == 0 {
		return nil
	}
	files := make([]fileID, len(pieces))
	for i := range pieces {
		var st unix.Stat_t
		if unix.Fstat(fds[i], &st) != nil {
			return nil
		}
		files[i] = fileID{st.Dev, st.Ino}
	}
	for _, m := range c.regions[files[0]] {
		if m.holds(pieces, files) {
			return m.view(r.Addr, r.Length)
		}
	}
	return nil
}

// holds reports whether every piece, with its file, lies within one of m's
// pieces of the same file at the matching offset.
func (m *regionMap) holds(pieces []wireMRPiece, files []fileID) bool {
	for i, p := range pieces {
		ok := false
		for _, q := range m.pieces {
			if q.file == files[i] && p.VAddr >= q.vaddr && p.VAddr-q.vaddr <= q.len &&
				p.Len <= q.len-(p.VAddr-q.vaddr) && p.Offset == q.off+(p.VAddr-q.vaddr) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// addRegion indexes a new mapping under each file it maps. Called with c.mu
// held.
func (c *conn) addRegion(m *regionMap) {
	if c.regions == nil {
		c.regions = map[fileID][]*regionMap{}
	}
	for i, p := range m.pieces {
		if i > 0 && m.pieces[i-1].file == p.file {
			continue
		}
		c.regions[p.file] = append(c.regions[p.file], m)
	}
}

// forgetRegion drops an unmapped mapping from the index. Called with c.mu
// held.
func (c *conn) forgetRegion(m *regionMap) {
	for _, p := range m.pieces {
		list := c.regions[p.file]
		for i, x := range list {
			if x == m {
				list[i] = list[len(list)-1]
				list = list[:len(list)-1]
				break
			}
		}
		if len(list) == 0 {
			delete(c.regions, p.file)
		} else {
			c.regions[p.file] = list
		}
	}
}
