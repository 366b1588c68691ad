package clib_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/spinlock"
	"github.com/shmlock/shmlock/upgrade"
)

// The Go fuzzers' corpora replayed against C: every input a Go fuzz target
// found interesting (the committed corpus, and with
// SHMLOCK_FUZZ_CORPUS=DIR the fuzz cache's as well) is put in a segment as
// that target puts it, and C's calls on it must end as Go's do and agree
// with Go's reading of it. Here the replays of the owner slots, upgrade
// mutexes, claim directories, lock-manager names and data regions; the
// lock table's is in lockmgr_test.go and the header's in segment_test.go.

// TestSpinFuzzCorpusC replays spinlock's FuzzSlot against C: each input is
// the words of a lock's owner slot, and in each mode a C process's try (a
// nested one if granted) and wait of 200 µs must end cleanly, every grant
// released again, and a slot that was free be free after it. Each input is
// replayed twice: as written, and as the C process's own (a non-zero PID
// word replaced by its identity), since the fuzzer's process wrote its own
// identity there.
func TestSpinFuzzCorpusC(t *testing.T) {
	path, seg := replaySegment(t, layout.Options{Slots: 1})
	slots, err := seg.Region(layout.KindOwnerSlots)
	require.NoError(t, err)
	slot := slots[:layout.OwnerSlotSize]
	twin := newSpinTwin(t)
	for _, f := range fuzzCorpus(t, "spinlock", "FuzzSlot") {
		data := fuzzInput(t, f)
		for _, mode := range []string{"pidtid", "token"} {
			l, err := spinlock.Open(seg, 0, spinMode(mode))
			require.NoError(t, err)
			for _, own := range []bool{false, true} {
				what := fmt.Sprintf("%s, %s, own %v", filepath.Base(f), mode, own)
				out := replayC(t, what, func() { clear(slot) }, func(id uint64) {
					copy(slot, data)
					if own && binary.LittleEndian.Uint64(slot) != 0 {
						binary.LittleEndian.PutUint64(slot, id)
					}
				}, func() bool {
					_, held := l.Owner()
					return !held
				}, "spin", "try", path, "0", mode)
				if !own { // C's own identity cannot be Go's: only the words as written have a twin
					line, _ := testproc.Line(out, "try ")
					var got, nested int
					_, err := fmt.Sscanf(line, "%d %d", &got, &nested)
					require.NoError(t, err, "%s: %q", what, line)
					require.Equal(t, twin.try(t, data, spinMode(mode)), cOutcome(got, true)+" "+cOutcome(nested, true),
						"%s: Go on the twin slot (want), C (got)", what)
				}
			}
			require.NoError(t, l.Close())
		}
	}
}

// spinTwin is a slot on which Go repeats the C spin helper's try and
// nested try. (Its 200 µs wait is not repeated: see upgradeTwin.try.)
type spinTwin struct {
	seg  *shm.Segment
	slot []byte
}

func newSpinTwin(t *testing.T) *spinTwin {
	_, seg := replaySegment(t, layout.Options{Slots: 1})
	slots, err := seg.Region(layout.KindOwnerSlots)
	require.NoError(t, err)
	return &spinTwin{seg: seg, slot: slots[:layout.OwnerSlotSize]}
}

// try writes data over the twin's slot and makes the helper's try and,
// if granted, nested try with one new identity, releasing each grant;
// the outcomes as cOutcome words C's.
func (tw *spinTwin) try(t *testing.T, data []byte, mode spinlock.Mode) string {
	l, err := spinlock.Open(tw.seg, 0, mode)
	require.NoError(t, err)
	defer func() { require.NoError(t, l.Close()) }()
	clear(tw.slot)
	copy(tw.slot, data)
	id := newIdentity(mode)
	outcome := func(g *spinlock.Guard, err error) string {
		switch {
		case err != nil:
			return fmt.Sprint(codeOf(t, err, spinCodes))
		case g.Inconsistent() || g.Reclaimed():
			return "told"
		}
		return "granted"
	}
	g, err := l.TryLock(id)
	got, nested := outcome(g, err), fmt.Sprint(-40) // C prints EWOULDBLOCK for a nested try not made
	if err == nil {
		g2, err := l.TryLock(id)
		if nested = outcome(g2, err); err == nil {
			require.NoError(t, g2.Release())
		}
		require.NoError(t, g.Release())
	}
	return got + " " + nested
}

// TestUpgradeFuzzCorpusC replays upgrade's FuzzEntry against C: each input
// is the words of the upgrade table and its reader records (in a segment
// of the fuzz target's shape), and each kind of C try, and of wait of
// 200 µs, must end cleanly, a grant released again, and a free mutex be
// free after it. The C process claims its reader record before the words
// are written (the first one, as FuzzEntry's handle has), and each input
// is replayed as written and as the C process's own (every non-zero
// identity of a writer, an upgrader or a reader record replaced by its
// identity).
func TestUpgradeFuzzCorpusC(t *testing.T) {
	path, seg := replaySegment(t, upgradeTestOptions)
	ups, err := seg.Region(layout.KindUpgrades)
	require.NoError(t, err)
	readers, err := seg.Region(layout.KindUpgradeReaders)
	require.NoError(t, err)
	entry, err := seg.Upgrade(0)
	require.NoError(t, err)
	records, err := seg.UpgradeReaders(0)
	require.NoError(t, err)
	identities := []*atomic.Uint64{&entry.Writer, &entry.Upgrader}
	for _, r := range records {
		identities = append(identities, &r.Owner)
	}
	twin := newUpgradeTwin(t)
	for _, f := range fuzzCorpus(t, "upgrade", "FuzzEntry") {
		data := fuzzInput(t, f)
		for _, kind := range []string{"unique", "shared", "upgrade"} {
			for _, own := range []bool{false, true} {
				what := fmt.Sprintf("%s, %s, own %v", filepath.Base(f), kind, own)
				out := replayC(t, what, func() { clear(ups); clear(readers) }, func(id uint64) {
					clear(ups)
					clear(readers)
					copy(readers, data[copy(ups, data):])
					for _, w := range identities {
						if own && w.Load() != 0 {
							w.Store(id)
						}
					}
				}, func() bool { return layout.UpgradeFree(entry, records) }, "upgrade", "try", path, "0", kind)
				if !own { // C's own identities cannot be Go's: only the words as written have a twin
					line, _ := testproc.Line(out, "try ")
					var got int
					_, err := fmt.Sscanf(line, "%d", &got)
					require.NoError(t, err, "%s: %q", what, line)
					require.Equal(t, twin.try(t, data, kind), cOutcome(got, kind != "shared"),
						"%s: Go's handle on the twin (want), C's (got)", what)
				}
			}
		}
	}
}

// upgradeTwin is a segment of FuzzEntry's shape on which Go repeats what
// the C upgrade helper's try does.
type upgradeTwin struct {
	seg          *shm.Segment
	ups, readers []byte
}

func newUpgradeTwin(t *testing.T) *upgradeTwin {
	_, seg := replaySegment(t, upgradeTestOptions)
	var err error
	tw := &upgradeTwin{seg: seg}
	tw.ups, err = seg.Region(layout.KindUpgrades)
	require.NoError(t, err)
	tw.readers, err = seg.Region(layout.KindUpgradeReaders)
	require.NoError(t, err)
	return tw
}

// try is the helper's try on the twin: a handle that claims its reader
// record on the clean mutex, the words written under it, and one try of
// kind (a grant released as the helper does), its outcome as cOutcome
// words C's. (The helper's 200 µs wait is not repeated: its
// outcome near the deadline depends on whether a liveness check, which
// frees a dead holder's hold, falls before it, in either language: timing,
// not the protocol. Both must only end.)
func (tw *upgradeTwin) try(t *testing.T, data []byte, kind string) string {
	clear(tw.ups)
	clear(tw.readers)
	m, err := upgrade.Open(tw.seg, 0)
	require.NoError(t, err)
	defer func() { _ = m.Close() }() // refused where the words say the handle holds it, as in C
	require.NoError(t, m.LockShared())
	require.NoError(t, m.UnlockShared())
	copy(tw.readers, data[copy(tw.ups, data):])
	var lock, release func() error
	switch kind {
	case "unique":
		lock, release = m.TryLock, m.Unlock
	case "shared":
		lock, release = m.TryLockShared, m.UnlockShared
	case "upgrade":
		lock, release = m.TryLockUpgrade, func() error {
			if m.TryUpgradeToUnique() == nil {
				if err := m.UniqueToUpgrade(); err != nil {
					return err
				}
			}
			return m.UnlockUpgrade()
		}
	}
	err = lock()
	switch {
	case err != nil:
		return fmt.Sprint(codeOf(t, err, upgradeCodes))
	case kind != "shared" && m.Reclaimed():
		require.NoError(t, release())
		return "told" // C: OWNERDEAD or INCONSISTENT
	}
	require.NoError(t, release())
	return "granted"
}

// cOutcome words a C acquisition's code as the twins word Go's: "granted",
// "told" (a positive report, OWNERDEAD or INCONSISTENT, where the kind of
// acquisition has one in Go: tells), or the failure's code.
func cOutcome(rc int, tells bool) string {
	switch {
	case rc < 0:
		return fmt.Sprint(rc)
	case rc > 0 && tells:
		return "told"
	}
	return "granted"
}

// errCode is a Go error and the C code that stands for it.
type errCode struct {
	err  error
	code int
}

var (
	spinCodes    = []errCode{{spinlock.ErrWouldBlock, -40}, {spinlock.ErrNotOwner, -42}, {spinlock.ErrRecursion, -44}}
	upgradeCodes = []errCode{{upgrade.ErrWouldBlock, -40}, {upgrade.ErrNotOwner, -42}, {upgrade.ErrNotHeld, -43},
		{upgrade.ErrHeld, -46}, {upgrade.ErrOverflow, -47}, {upgrade.ErrTooManyReaders, -48}}
)

// codeOf is the C code of err, one of codes.
func codeOf(t *testing.T, err error, codes []errCode) int {
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	t.Fatalf("an error with no C code: %v", err)
	return 0
}

// TestDirectoryFuzzCorpusC replays shm's FuzzDirectory against C: each
// input is the words of the claim directories, the claim references and
// the claimable tables (in a segment of the fuzz target's shape), with a
// dead holder of the registry lock where the input says so. A C process
// claims named and unnamed entries on it, holding them, and Go makes the
// same claims in the same order on a twin segment with the same words:
// each must succeed or fail alike (the same entry, or the same code), and
// each of C's claims must be one that Go's Claims lists and Lookup finds
// under its name, and be released again. The registry word is the one the
// input's control bytes choose; inputs whose holder is live (C would wait
// for it) or whose owners are of another boot (FuzzDirectory's Open
// recovers those, the replay's segments are open already) are left out.
func TestDirectoryFuzzCorpusC(t *testing.T) {
	const (
		tableFull   = -31 // SHMLOCK_ETABLEFULL
		useMismatch = -33 // SHMLOCK_EUSEMISMATCH
	)
	kinds := map[string]layout.Kind{"1": layout.KindOwnerSlots, "2": layout.KindUpgrades}
	self := proc.Self()
	dead := proc.Identity{PID: self.PID, StartTicks: self.StartTicks + 1}.Pack() // our pid, reused by us
	type segment struct {
		path    string
		seg     *shm.Segment
		regions [][]byte
		file    *os.File
	}
	newSegment := func() segment {
		path, seg := replaySegment(t, layout.Options{ // FuzzDirectory's
			Slots: 4, Upgrades: 2, UpgradeReaders: 2, ClaimRefs: 6,
			TxnRecords: -1, TxnArenaBytes: -1, LockMgrEntries: -1,
		})
		file, err := os.OpenFile(path, os.O_RDWR, 0)
		require.NoError(t, err)
		t.Cleanup(func() { _ = file.Close() })
		s := segment{path: path, seg: seg, file: file}
		for _, k := range []layout.Kind{ // FuzzDirectory's order
			layout.KindSlotDirectory, layout.KindUpgradeDirectory, layout.KindClaimRefs,
			layout.KindOwnerSlots, layout.KindUpgrades, layout.KindUpgradeReaders,
		} {
			r, err := seg.Region(k)
			require.NoError(t, err)
			s.regions = append(s.regions, r)
		}
		return s
	}
	put := func(s segment, data []byte, holder uint64) {
		for _, r := range s.regions {
			data = data[copy(r, data):]
		}
		_, err := s.file.WriteAt(binary.LittleEndian.AppendUint64(nil, holder), layout.OffRegistry)
		require.NoError(t, err)
	}
	forC, forGo := newSegment(), newSegment()
	for _, f := range fuzzCorpus(t, "shm", "FuzzDirectory") {
		args := fuzzArgs(t, f)
		require.Len(t, args, 3, f)
		data, ctl := fuzzBytes(t, f, args[0]), fuzzBytes(t, f, args[1])
		holder, ok := directoryRegistryWord(ctl, dead)
		if !ok || (len(ctl) > 1 && ctl[1]&1 != 0) {
			continue // a live holder, or the owners of another boot
		}
		for _, s := range []segment{forC, forGo} {
			for _, r := range s.regions {
				clear(r)
			}
		}
		c := startCWithStdin(t, "segment", "claims", forC.path)
		c.WaitLine(t, "ready")
		put(forC, data, holder)
		c.Send(t, "go")
		c.WaitLine(t, "claimed")

		// Go's claims on the twin, in C's order (segment.c's claims).
		put(forGo, data, holder)
		var want []string
		type held struct {
			k layout.Kind
			i int
		}
		var goHolds []held
		for kind, k := range []layout.Kind{layout.KindOwnerSlots, layout.KindUpgrades} {
			for _, try := range []struct {
				name string
				use  uint32
			}{{"queue", 0}, {"jobs", 1}, {"fuzz", 0}, {"", 0}} {
				i, err := forGo.seg.ClaimAs(k, try.name, try.use)
				rc := 0
				switch {
				case err == nil:
					goHolds = append(goHolds, held{k, i})
				case errors.Is(err, shm.ErrTableFull):
					rc, i = tableFull, 0
				case errors.Is(err, shm.ErrUseMismatch):
					rc, i = useMismatch, 0
				default:
					t.Fatalf("%s: Go's claim of %v %q: %v", filepath.Base(f), k, try.name, err)
				}
				want = append(want, fmt.Sprintf("claim %d %s %d %d", kind+1, cmp.Or(try.name, "-"), rc, i))
			}
		}
		var got []string
		for _, line := range strings.Split(c.Out.String(), "\n") {
			if strings.HasPrefix(line, "claim ") {
				got = append(got, line)
			}
		}
		require.Equal(t, want, got, "%s: Go's claims on the twin (want) and C's (got)", filepath.Base(f))

		for _, line := range got {
			var kind, name string
			var rc, index int
			if n, _ := fmt.Sscanf(line, "claim %s %s %d %d", &kind, &name, &rc, &index); n != 4 || rc != 0 {
				continue
			}
			what := fmt.Sprintf("%s: C's claim of %v %q", filepath.Base(f), kinds[kind], name)
			claims, err := forC.seg.Claims(kinds[kind])
			require.NoError(t, err)
			require.True(t, slices.ContainsFunc(claims, func(c shm.Claim) bool { return c.Index == index }), "%s: %d, which Claims does not list", what, index)
			if name != "-" {
				i, err := forC.seg.Lookup(kinds[kind], name)
				require.NoError(t, err, "%s; C said:\n%s", what, c.Out)
				require.Equal(t, index, i, "%s: Lookup finds another entry", what)
			}
		}
		c.Send(t, "go")
		requireSucceeded(t, c, filepath.Base(f))
		for _, h := range goHolds {
			require.NoError(t, forGo.seg.Release(h.k, h.i))
		}
	}
}

// FuzzDirectory's registry modes (shm/fuzz_test.go), which its first
// control byte chooses modulo replayNumRegistryModes.
const (
	replayRegistryFree = iota
	replayRegistryDead
	replayRegistryStaleDead
	replayRegistryStaleSelf
	replayRegistryLiveSelf
	replayRegistryLiveParent
	replayRegistryGarbage
	replayNumRegistryModes
)

// directoryRegistryWord is the registry word FuzzDirectory's control
// bytes ctl choose, dead being the dead process's identity; false for a
// live holder.
func directoryRegistryWord(ctl []byte, dead uint64) (uint64, bool) {
	if len(ctl) == 0 {
		return 0, true
	}
	var w uint64
	switch ctl[0] % replayNumRegistryModes {
	case replayRegistryDead:
		w = dead
	case replayRegistryStaleDead:
		w = proc.MarkStale(dead)
	case replayRegistryStaleSelf:
		w = proc.MarkStale(proc.Self().Pack())
	case replayRegistryLiveSelf, replayRegistryLiveParent:
		return 0, false
	case replayRegistryGarbage:
		var b [8]byte
		if len(ctl) > 2 {
			copy(b[:], ctl[2:])
		}
		w = binary.LittleEndian.Uint64(b[:])
	}
	return w, w == 0 || !(w == proc.Self().Pack() || proc.AlivePacked(w))
}

// TestLockMgrNamesFuzzCorpusC replays lockmgr's FuzzNames against C: for
// each resource and owner name of the corpus, C's acquisition must refuse
// the names Go refuses, with the same code, and grant those Go grants on
// the entry Go then finds under the same name (its next grant has a higher
// version). Names with a NUL byte are left out: a C string cannot hold
// one.
func TestLockMgrNamesFuzzCorpusC(t *testing.T) {
	ctx := context.Background()
	for _, f := range fuzzCorpus(t, "lockmgr", "FuzzNames") {
		args := fuzzArgs(t, f)
		require.Len(t, args, 2, f)
		res, own := fuzzString(t, f, args[0]), fuzzString(t, f, args[1])
		if strings.ContainsRune(res, 0) || strings.ContainsRune(own, 0) {
			continue
		}
		path, seg, m, _ := newLockMgrSegment(t, 8)
		var rc int
		var cCode string
		var cVersion uint64
		line := tryC(t, path, res, own, "exclusive")
		_, err := fmt.Sscanf(line, "%d %s", &rc, &cCode)
		require.NoError(t, err, "%s: %q", filepath.Base(f), line)
		if rc == 0 {
			_, err = fmt.Sscanf(line, "%d %s version=%d", &rc, &cCode, &cVersion)
			require.NoError(t, err, "%s: %q", filepath.Base(f), line)
		}
		info, err := m.Acquire(ctx, res, own, lockmgr.Exclusive, lockmgr.AcquireOptions{})
		goCode := cmp.Or(lockmgr.Code(err), "-")
		require.Equal(t, goCode, cCode, "%s: %q, %q: Go's code (error %v), C's", filepath.Base(f), res, own, err)
		if err == nil {
			require.Greater(t, info.Version, cVersion, "%s: %q: Go's grant on C's entry", filepath.Base(f), res)
			require.NoError(t, m.Release(res, own))
		}
		require.NoError(t, seg.Close())
	}
}

// fuzzString is the value of a string argument line.
func fuzzString(t *testing.T, path, line string) string {
	arg, ok := strings.CutPrefix(line, "string(")
	require.True(t, ok, path)
	s, err := strconv.Unquote(strings.TrimSuffix(arg, ")"))
	require.NoError(t, err, path)
	return s
}

// TestRegionsFuzzCorpusC replays layout's FuzzDecodeRegions against C: each
// input's directory is a segment's region directory (16 entries, a data
// area of 4096 bytes), and C must find exactly the regions Go decodes from
// it, at the same offsets, and claim a new region only where Go would (a
// sound directory with room), where Go would place it; else refuse it
// with the code Go's reason has.
func TestRegionsFuzzCorpusC(t *testing.T) {
	const (
		notFound  = -32 // SHMLOCK_ENOTFOUND
		malformed = -24 // SHMLOCK_EMALFORMED: the directory is damaged
		dataFull  = -36 // SHMLOCK_EDATAFULL
		tableFull = -31 // SHMLOCK_ETABLEFULL
	)
	for _, f := range fuzzCorpus(t, "layout", "FuzzDecodeRegions") {
		args := fuzzArgs(t, f)
		require.Len(t, args, 2, f)
		dir := fuzzBytes(t, f, args[0])
		path, seg := replaySegment(t, layout.Options{DataBytes: 4096, DataRegions: 16})
		mem, err := seg.Region(layout.KindRegionDirectory)
		require.NoError(t, err)
		clear(mem)
		copy(mem, dir)
		area, _, err := seg.DataArea()
		require.NoError(t, err)
		tab := layout.DecodeRegions(bytes.Clone(mem), uint64(area))
		names := []string{"queue", "stats", "größe", "c-new"}
		for _, r := range tab.Regions {
			if !slices.Contains(names, r.Name) {
				names = append(names, r.Name)
			}
		}
		out := startC(t, "segment", append([]string{"regions", path}, names...)...).WaitOK(t)
		var found []string
		var claim string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			switch {
			case strings.HasPrefix(line, "region "):
				found = append(found, line)
			case strings.HasPrefix(line, "claim "):
				claim = line
			}
		}
		require.Len(t, found, len(names), "%s: C's output:\n%s", filepath.Base(f), out)
		lastTwo := func(line string) (rc, off int64) {
			fields := strings.Fields(line)
			rc, err1 := strconv.ParseInt(fields[len(fields)-2], 10, 64)
			off, err2 := strconv.ParseInt(fields[len(fields)-1], 10, 64)
			require.NoError(t, cmp.Or(err1, err2), line)
			return rc, off
		}
		for j, name := range names {
			rc, off := lastTwo(found[j])
			what := fmt.Sprintf("%s: region %q", filepath.Base(f), name)
			if r, ok := tab.Find(name); ok {
				require.Equal(t, []int64{0, int64(r.Offset)}, []int64{rc, off}, "%s: Go decodes it at %d", what, r.Offset)
			} else {
				require.Equal(t, int64(notFound), rc, "%s: Go does not decode it", what)
			}
		}
		if _, ok := tab.Find("c-new"); !ok {
			rc, off := lastTwo(claim)
			want := []int64{0, int64(tab.End)}
			switch {
			case !tab.Sound:
				want = []int64{malformed, -1}
			case 64 > uint64(area)-min(tab.End, uint64(area)):
				want = []int64{dataFull, -1}
			case tab.Free < 0:
				want = []int64{tableFull, -1}
			}
			require.Equal(t, want, []int64{rc, off}, "%s: C's claim of a new region (Go's table: sound %v, end %d, free %d)", filepath.Base(f), tab.Sound, tab.End, tab.Free)
		}
	}
}

// replaySegment creates a segment of opts for a replay, closed and removed
// when the test ends.
func replaySegment(t *testing.T, opts layout.Options) (string, *shm.Segment) {
	path := testproc.SegmentPath(t)
	seg, err := shm.Create(path, shm.Options{Options: opts})
	require.NoError(t, err)
	t.Cleanup(func() { _ = seg.Close(); _ = shm.Remove(path) })
	return path, seg
}

// upgradeTestOptions are upgrade's testOptions, the shape of FuzzEntry's
// segment.
var upgradeTestOptions = layout.Options{
	Slots: 1, Upgrades: 2, UpgradeReaders: 8, TxnRecords: -1, TxnArenaBytes: -1, LockMgrEntries: 1,
}

// replayC runs C helper program with args, which opens its lock (on the
// words reset sets, clean ones), prints "ready" and then waits for a line:
// in between, put writes the input under its open handle (given the
// helper's packed identity). The helper must then exit 0, and if free said
// yes before, say yes after. It returns the helper's output.
func replayC(t *testing.T, what string, reset func(), put func(id uint64), free func() bool, program string, args ...string) (out string) {
	t.Helper()
	reset()
	c := startCWithStdin(t, program, args...)
	c.WaitLine(t, "ready")
	put(c.Identity(t))
	freeBefore := free()
	c.Send(t, "go")
	requireSucceeded(t, c, what)
	if freeBefore && !free() {
		t.Fatalf("%s: free before C's try, held after the grant's release", what)
	}
	return c.Out.String()
}

// fuzzInput reads a fuzz corpus file of one []byte argument.
func fuzzInput(t *testing.T, path string) []byte {
	args := fuzzArgs(t, path)
	require.Len(t, args, 1, path)
	return fuzzBytes(t, path, args[0])
}

// fuzzArgs are the argument lines of a fuzz corpus file.
func fuzzArgs(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Equal(t, "go test fuzz v1", lines[0], path)
	return lines[1:]
}

// fuzzBytes is the value of a []byte argument line.
func fuzzBytes(t *testing.T, path, line string) []byte {
	arg, ok := strings.CutPrefix(line, "[]byte(")
	require.True(t, ok, path)
	s, err := strconv.Unquote(strings.TrimSuffix(arg, ")"))
	require.NoError(t, err, path)
	return []byte(s)
}

// fuzzCorpus is the committed corpus of fuzz target name in package dir,
// and with SHMLOCK_FUZZ_CORPUS=DIR also the files of DIR/dir/name (DIR the
// module's fuzz cache, $(go env GOCACHE)/fuzz/github.com/shmlock/shmlock,
// which holds every package's) and of DIR/name (DIR one package's).
func fuzzCorpus(t *testing.T, dir, name string) []string {
	files, err := filepath.Glob(filepath.Join("..", dir, "testdata", "fuzz", name, "*"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	if more := os.Getenv("SHMLOCK_FUZZ_CORPUS"); more != "" {
		for _, d := range []string{filepath.Join(more, dir, name), filepath.Join(more, name)} {
			extra, err := filepath.Glob(filepath.Join(d, "*"))
			require.NoError(t, err)
			files = append(files, extra...)
		}
	}
	return files
}

// SHMLOCK_FUZZ_CORPUS names the module's fuzz cache, as the README's
// command does, and each replay finds its own package's inputs there, or
// one package's cache directory, as it did first.
func TestFuzzCorpusFindsTheCache(t *testing.T) {
	cache := t.TempDir()
	for _, f := range []string{"spinlock/FuzzSlot/a", "layout/FuzzValidate/b", "FuzzTable/c"} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(cache, f)), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(cache, f), nil, 0o600))
	}
	t.Setenv("SHMLOCK_FUZZ_CORPUS", cache)
	require.Contains(t, fuzzCorpus(t, "spinlock", "FuzzSlot"), filepath.Join(cache, "spinlock/FuzzSlot/a"))
	require.Contains(t, fuzzCorpus(t, "layout", "FuzzValidate"), filepath.Join(cache, "layout/FuzzValidate/b"))
	require.Contains(t, fuzzCorpus(t, "lockmgr", "FuzzTable"), filepath.Join(cache, "FuzzTable/c"))
}

// requireEnded fails the test if C helper c, which has exited, died of a
// signal or printed a sanitizer's report.
func requireEnded(t *testing.T, c *testproc.Child, what string) {
	t.Helper()
	var exit *exec.ExitError
	if err := c.Wait(t); errors.As(err, &exit) {
		ws, _ := exit.Sys().(syscall.WaitStatus)
		require.False(t, ws.Signaled(), "%s: C died of %v; output:\n%s", what, ws.Signal(), c.Out)
	}
	require.NotContains(t, c.Out.String(), "Sanitizer", "%s (a sanitizer build of the helpers)", what)
}

// requireSucceeded fails the test if C helper c did not exit 0 or printed
// a sanitizer's report.
func requireSucceeded(t *testing.T, c *testproc.Child, what string) {
	t.Helper()
	if err := c.Wait(t); err != nil {
		t.Fatalf("%s: C failed: %v; output:\n%s", what, err, c.Out)
	}
	require.NotContains(t, c.Out.String(), "Sanitizer", "%s (a sanitizer build of the helpers)", what)
}
