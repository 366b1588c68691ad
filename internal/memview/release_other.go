//go:build !amd64 || race

package memview

import "sync/atomic"

// StoreRelease32 is an atomic store off amd64 (on arm64 a store-release,
// STLR: cheap; on 386 the one 64-bit store that is not two halves) and in
// race-detector builds; see release_tso.go.
func StoreRelease32(w *atomic.Uint32, v uint32) { w.Store(v) }

// StoreRelease64 is StoreRelease32 for a 64-bit word.
func StoreRelease64(w *atomic.Uint64, v uint64) { w.Store(v) }
