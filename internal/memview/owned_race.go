//go:build race

package memview

import "sync/atomic"

// StoreOwned is atomic in race-detector builds; see owned_norace.go.
func StoreOwned(w *atomic.Uint64, v uint64) { w.Store(v) }

// StoreOwned32 is atomic in race-detector builds; see owned_norace.go.
func StoreOwned32(w *atomic.Uint32, v uint32) { w.Store(v) }
