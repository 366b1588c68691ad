// Package memview turns offsets in a shared mapping into typed pointers.
//
// It is the one place outside internal/futex where shmlock uses unsafe:
// every word that other processes also touch is reached through a pointer
// made here, once, after a bounds and alignment check, and then used only
// through sync/atomic.
package memview
