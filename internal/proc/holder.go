package proc

import "math/rand/v2"

// HolderID returns a random non-zero id for one holder of a lock within
// this process. A lock records it beside the packed identity (Self().Pack()),
// so holders of one process are told apart, and, being random, ids of
// different processes (and of a dead process and its pid's next user)
// never match in practice. 0 stays free to mean "no holder".
func HolderID() uint64 {
	for {
		if v := rand.Uint64(); v != 0 {
			return v
		}
	}
}
