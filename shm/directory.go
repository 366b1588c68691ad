package shm

import (
	"fmt"
	"runtime"
	"time"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
)

// Claim is one claimed entry of a table, as Claims reports it.
type Claim struct {
	Index   int
	Name    string // "" for an unnamed claim
	Refs    uint32 // claims not yet released
	Claimer uint64 // packed identity of the first claimant (internal/proc)
	Use     uint32 // what the claimants said they use it as (ClaimAs); 0 if unsaid
}

// directoryOf maps a claimable table to its directory.
func directoryOf(k layout.Kind) (layout.Kind, error) {
	switch k {
	case layout.KindOwnerSlots:
		return layout.KindSlotDirectory, nil
	case layout.KindUpgrades:
		return layout.KindUpgradeDirectory, nil
	}
	return 0, fmt.Errorf("%w: %v", ErrNotClaimable, k)
}

// Claim claims an entry of table k (layout.KindOwnerSlots or
// layout.KindUpgrades) and returns its index. With a name, an entry already
// claimed under that name is returned with one more reference, so unrelated
// processes that claim one name share one entry; otherwise, and always for
// name "", a free entry is zeroed and claimed. ErrTableFull when none is
// free; a bad name is a layout.ErrBadName error. Nothing changes on error.
func (s *Segment) Claim(k layout.Kind, name string) (int, error) {
	return s.ClaimAs(k, name, 0)
}

// ClaimAs is Claim for claimants that say what they use the entry as: a
// small number of the caller's choosing, such as a lock's mode, recorded in
// the directory for tools (shmctl slots) and checked against later
// claimants. Claiming a named entry recorded with another non-zero use
// fails with ErrUseMismatch and changes nothing; use 0 matches anything,
// and an entry first claimed with use 0 takes the first use given.
func (s *Segment) ClaimAs(k layout.Kind, name string, use uint32) (int, error) {
	dk, err := directoryOf(k)
	if err != nil {
		return -1, err
	}
	if name != "" {
		if err := layout.CheckName(name); err != nil {
			return -1, err
		}
	}
	if err := s.writable(); err != nil {
		return -1, err
	}
	if err := s.lockRegistry(); err != nil {
		return -1, err
	}
	defer s.unlockRegistry()

	free, parked := -1, -1
	for i := range s.Len(k) {
		e, err := entry[layout.DirEntry](s, dk, i)
		if err != nil {
			return -1, err
		}
		switch {
		case e.State.Load() == layout.DirFree:
			if free < 0 {
				free = i
			}
		case e.Refs.Load() == 0 && (name == "" || layout.NameOf(e) != name) && parked < 0 && s.lockFree(k, i, e.Use.Load()):
			parked = i // recyclable, if nothing is free
		case name != "" && layout.NameOf(e) == name:
			switch had := e.Use.Load(); {
			case use == 0 || had == use:
			case had == 0:
				e.Use.Store(use)
			default:
				return -1, fmt.Errorf("%w: %v %q is claimed for use %d, not %d", ErrUseMismatch, k, name, had, use)
			}
			e.Refs.Add(1)
			s.regGen.Add(1)
			return i, nil
		}
	}
	if free < 0 && parked >= 0 {
		// The claim of a lock nobody references and nobody holds: its
		// name goes, and the entry is claimed anew below.
		if err := s.freeEntry(k, dk, parked); err != nil {
			return -1, err
		}
		free = parked
	}
	if free < 0 {
		return -1, fmt.Errorf("%w: %v has %d entries, all claimed", ErrTableFull, k, s.Len(k))
	}
	// ErrClosed if Close has begun (it waits for this change to end):
	// nothing is changed yet.
	e, err := entry[layout.DirEntry](s, dk, free)
	if err != nil {
		return -1, err
	}
	// The entry becomes visible only with the State store at the end, so a
	// claimant that dies before it leaves the entry free.
	if err := s.zeroEntry(k, free); err != nil {
		return -1, err
	}
	if err := s.zeroEntry(dk, free); err != nil {
		return -1, err
	}
	copy(e.Name[:], name)
	e.NameLen.Store(uint32(len(name)))
	e.Use.Store(use)
	e.Claimer.Store(proc.Self().Pack())
	e.Refs.Store(1)
	testHookBeforePublish()
	e.State.Store(layout.DirClaimed)
	s.regGen.Add(1)
	return free, nil
}

// Release drops one reference to entry i of table k. The last one frees
// the entry and zeroes it if its lock is free; a lock still held (or
// marked inconsistent) keeps its claim, unreferenced, until a claim of its
// name takes it up again or, once the lock is free, a claim that finds no
// free entry recycles it. ErrNotClaimed if it is not claimed, or has no
// reference left. A release works after Close too, like the lock
// packages' releases.
func (s *Segment) Release(k layout.Kind, i int) error {
	dk, err := directoryOf(k)
	if err != nil {
		return err
	}
	if s.readOnly {
		return ErrReadOnly // a release works after Close, though
	}
	e, err := entryOf[layout.DirEntry](s, dk, i)
	if err != nil {
		return err
	}
	if err := s.lockRegistryFor(true); err != nil {
		return err
	}
	defer s.unlockRegistry()
	if e.State.Load() != layout.DirClaimed {
		return fmt.Errorf("%w: %v[%d]", ErrNotClaimed, k, i)
	}
	if e.Refs.Load() == 0 {
		return fmt.Errorf("%w: %v[%d] has no reference left", ErrNotClaimed, k, i)
	}
	if e.Refs.Add(^uint32(0)) == 0 && s.lockFree(k, i, e.Use.Load()) {
		if err := s.freeEntry(k, dk, i); err != nil {
			return err
		}
	}
	// A lock still held (or marked inconsistent) keeps its claim with no
	// reference: a later claim of its name finds it as it is, and only a
	// free one is recycled (ClaimAs).
	s.regGen.Add(1)
	return nil
}

// freeEntry frees entry i of table k and its directory entry dk[i],
// zeroing both. Under the registry lock.
func (s *Segment) freeEntry(k, dk layout.Kind, i int) error {
	e, err := entryOf[layout.DirEntry](s, dk, i)
	if err != nil {
		return err
	}
	e.State.Store(layout.DirFree) // first: a half-cleared entry is then merely free
	if err := s.zeroEntry(k, i); err != nil {
		return err
	}
	if err := s.zeroEntry(dk, i); err != nil {
		return err
	}
	if k == layout.KindUpgrades {
		// The mutex's reader records go with it: a new claimant starts
		// with no readers.
		n := s.header.ReadersPerUpgrade()
		for j := range n {
			if err := s.zeroEntry(layout.KindUpgradeReaders, i*n+j); err != nil {
				return err
			}
		}
	}
	return nil
}

// lockFree reports whether entry i of table k is a free lock that carries
// nothing its next holder must be told (see layout.SlotFree and
// layout.UpgradeFree): only such a claim is freed or recycled.
func (s *Segment) lockFree(k layout.Kind, i int, use uint32) bool {
	switch k {
	case layout.KindOwnerSlots:
		slot, err := entryOf[layout.OwnerSlot](s, k, i)
		return err == nil && layout.SlotFree(slot, use)
	case layout.KindUpgrades:
		e, err := entryOf[layout.UpgradeEntry](s, k, i)
		if err != nil {
			return false
		}
		n := s.header.ReadersPerUpgrade()
		rs := make([]*layout.ReaderRecord, n)
		for j := range n {
			if rs[j], err = entryOf[layout.ReaderRecord](s, layout.KindUpgradeReaders, i*n+j); err != nil {
				return false
			}
		}
		return layout.UpgradeFree(e, rs)
	}
	return false
}

// Lookup returns the index of the entry of table k claimed under name, or
// ErrNotFound. An invalid name, the empty one included, is a
// layout.ErrBadName error: no entry can be claimed under it. It takes no
// lock, so it works on a read-only segment.
func (s *Segment) Lookup(k layout.Kind, name string) (int, error) {
	if err := layout.CheckName(name); err != nil {
		return -1, err
	}
	claims, err := s.Claims(k)
	if err != nil {
		return -1, err
	}
	for _, c := range claims {
		if c.Name == name {
			return c.Index, nil
		}
	}
	return -1, fmt.Errorf("%w: %v %q", ErrNotFound, k, name)
}

// Claims lists the claimed entries of table k. It takes no lock: it reads
// the directory until two passes agree on the registry generation, so the
// list is consistent unless the directory changes continuously.
func (s *Segment) Claims(k layout.Kind) ([]Claim, error) {
	dk, err := directoryOf(k)
	if err != nil {
		return nil, err
	}
	var claims []Claim
	for attempt := 0; attempt < 4; attempt++ {
		if s.closed.Load() {
			return nil, ErrClosed
		}
		gen := s.regGen.Load()
		claims = claims[:0]
		for i := range s.Len(k) {
			e, err := entry[layout.DirEntry](s, dk, i)
			if err != nil {
				return nil, err
			}
			if e.State.Load() != layout.DirClaimed {
				continue
			}
			claims = append(claims, Claim{Index: i, Name: layout.NameOf(e), Refs: e.Refs.Load(), Claimer: e.Claimer.Load(), Use: e.Use.Load()})
		}
		if s.regGen.Load() == gen {
			break
		}
	}
	if s.closed.Load() {
		return nil, ErrClosed // as every read after Close
	}
	return claims, nil
}

func (s *Segment) writable() error {
	switch {
	case s.closed.Load():
		return ErrClosed
	case s.readOnly:
		return ErrReadOnly
	}
	return nil
}

// Registry lock: the word at layout.OffRegistry holds the packed identity of
// the process changing the directory, or 0. A waiter that finds the holder
// dead (exited, or its pid reused) takes the lock over with one CAS, so a
// process that dies mid-claim stalls the others only briefly. Goroutines of
// one process first queue on registryMu, so the word only ever sees one
// claimant per process. Close takes registryMu before it returns, so a
// change that holds the lock completes (and unlocks it) first, and one
// that waits for it gives up with ErrClosed.
const (
	registrySpins        = 64                   // Gosched rounds before sleeping
	registryMaxSleep     = 2 * time.Millisecond // longest sleep between attempts
	registryLivenessStep = 16                   // attempts between liveness checks
)

func (s *Segment) lockRegistry() error { return s.lockRegistryFor(false) }

// lockRegistryFor is lockRegistry; release: for a Release, which goes on
// after Close.
func (s *Segment) lockRegistryFor(release bool) error {
	s.registryMu.Lock()
	self := proc.Self().Pack()
	sleep := 10 * time.Microsecond
	for attempt := 0; ; attempt++ {
		if !release && s.closed.Load() {
			s.registryMu.Unlock()
			return ErrClosed
		}
		holder := s.registry.Load()
		if holder == 0 {
			if s.registry.CompareAndSwap(0, self) {
				return nil
			}
			continue
		}
		if attempt%registryLivenessStep == registryLivenessStep-1 && !s.OwnerAlive(holder) {
			if s.registry.CompareAndSwap(holder, self) {
				s.regGen.Add(1) // the dead holder's change, if any, is abandoned
				return nil
			}
			continue
		}
		if attempt < registrySpins {
			runtime.Gosched()
		} else {
			time.Sleep(sleep)
			sleep = min(2*sleep, registryMaxSleep)
		}
	}
}

func (s *Segment) unlockRegistry() {
	s.registry.Store(0)
	s.registryMu.Unlock()
}

// testHookBeforePublish runs between writing a new claim and publishing
// it; tests replace it to die mid-claim.
var testHookBeforePublish = func() {}
