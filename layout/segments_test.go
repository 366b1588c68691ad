package layout_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/shmlock/shmlock/internal/memview"
	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
)

// The segment images of testdata/segments at the root of the repository:
// one small segment per kind of table, in the state the packages leave it
// in, with holders recorded by a process (liveHolder) and holders marked
// dead (deadHolder, stale as the first open after a reboot marks every
// recorded identity). TestSegmentImages writes them with -update and reads
// them back word by word at the offsets docs/FORMAT.md gives, so an image,
// the specification and the Go declarations cannot drift apart.
// testdata/segments/README.md says what each holds; cmd/shmctl's golden
// tests run the commands on them.
const segmentsDir = "../testdata/segments"

// The identities the images record, packed as docs/FORMAT.md says: pid in
// bits 0-21, start ticks from bit 22, bit 63 stale.
const (
	creatorHolder = 1000 | 5000<<22           // pid 1000, started at tick 5000
	liveHolder    = 4242 | 120000<<22         // pid 4242, started at tick 120000
	deadHolder    = 4343 | 130000<<22 | 1<<63 // pid 4343, marked stale
	imageBootID   = "\xb0\x07\x1d\x00\x00\x00\x40\x00\x80\x00\x00\x00\x00\x00\x00\x01"
	imagePIDNS    = 4026531836            // the usual inode of the initial PID namespace
	imageCreated  = 1704067200_000000000  // 2024-01-01T00:00:00Z
	holderTID     = 0x1111_2222_3333_4444 // a holder id
	deadTID       = 0x5555_6666_7777_8888 // the dead holder's
	heldToken     = 0x0123_4567_89ab_cdef // a token-mode holder's token
	registryGen   = 9                     // directory changes made
)

// segmentImage is one image: the tables it has and how to fill them.
type segmentImage struct {
	file string
	opts layout.Options
	fill func(b *imageBuilder)
	// check reads the image as another implementation would: with the
	// header's table descriptors and docs/FORMAT.md's word offsets only.
	check func(t *testing.T, r imageReader)
}

var segmentImages = []segmentImage{
	{"owner-slots.seg", layout.Options{Slots: 4, ClaimRefs: 4}, fillOwnerSlots, checkOwnerSlots},
	{"upgrades.seg", layout.Options{Upgrades: 2, UpgradeReaders: 2, ClaimRefs: 4}, fillUpgrades, checkUpgrades},
	{"lockmgr.seg", layout.Options{LockMgrEntries: 4}, fillLockMgr, checkLockMgr},
	{"txn.seg", layout.Options{TxnRecords: 2, TxnArenaBytes: 4096}, fillTxn, checkTxn},
	{"data-regions.seg", layout.Options{DataBytes: 1024, DataRegions: 4}, fillDataRegions, checkDataRegions},
}

func TestSegmentImages(t *testing.T) {
	t.Parallel()
	if got, want := uint64(liveHolder), (proc.Identity{PID: 4242, StartTicks: 120000}).Pack(); got != want {
		t.Fatalf("liveHolder: got %#x, want internal/proc's packing %#x", got, want)
	}
	if got, want := uint64(deadHolder), proc.MarkStale(proc.Identity{PID: 4343, StartTicks: 130000}.Pack()); got != want {
		t.Fatalf("deadHolder: got %#x, want internal/proc's packing %#x", got, want)
	}
	for _, img := range segmentImages {
		t.Run(img.file, func(t *testing.T) {
			t.Parallel()
			built := buildImage(t, img)
			path := filepath.Join(segmentsDir, img.file)
			if *update {
				if err := os.MkdirAll(segmentsDir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, built, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			file, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("reading the image (run with -update to write it): %v", err)
			}
			if !bytes.Equal(file, built) {
				t.Fatalf("%s: got a file that differs from what the generator builds, want them equal (run with -update after an intended change)", path)
			}

			h, err := layout.Validate(file, int64(len(file)))
			if err != nil {
				t.Fatalf("Validate: got error %v, want nil", err)
			}
			if !layout.IsReady(file) {
				t.Errorf("ready word: got unset, want %#x", layout.ReadyMark)
			}
			r := imageReader{t: t, b: file, h: h}
			if got := r.u64(layout.OffOwnersBoot, 0) | r.u64(layout.OffOwnersBoot+8, 0); got == 0 {
				t.Errorf("owners' boot id: got zero, want the creator's")
			}
			if got := string(file[layout.OffOwnersBoot : layout.OffOwnersBoot+16]); got != imageBootID {
				t.Errorf("owners' boot id: got %x, want %x", got, imageBootID)
			}
			if got := r.u64(layout.OffRegistryGen, 0); got != registryGen {
				t.Errorf("registry generation: got %d, want %d", got, registryGen)
			}
			if h.Creator != creatorHolder || h.PIDNamespace != imagePIDNS || h.Created.UnixNano() != imageCreated {
				t.Errorf("identity: got creator %#x, pid namespace %d, created %v; want %#x, %d, %v",
					h.Creator, h.PIDNamespace, h.Created, uint64(creatorHolder), imagePIDNS, time.Unix(0, imageCreated))
			}
			img.check(t, r)
		})
	}
}

// imageBuilder writes an image through the layout package's own entry
// types, as the lock packages do.
type imageBuilder struct {
	t   testing.TB
	h   layout.Header
	buf []byte
}

func buildImage(tb testing.TB, img segmentImage) []byte {
	tb.Helper()
	h, err := layout.Plan(img.opts)
	if err != nil {
		tb.Fatalf("Plan(%+v): got error %v, want nil", img.opts, err)
	}
	h.Created = time.Unix(0, imageCreated)
	copy(h.BootID[:], imageBootID)
	h.PIDNamespace = imagePIDNS
	h.Creator = creatorHolder
	b := &imageBuilder{t: tb, h: h, buf: make([]byte, h.TotalSize)}
	layout.Encode(h, b.buf)
	img.fill(b)
	le.PutUint64(b.buf[layout.OffRegistryGen:], registryGen)
	le.PutUint32(b.buf[layout.OffReady:], layout.ReadyMark) // last, as a creator does
	return b.buf
}

// entry returns entry i of table k as a *T.
func entry[T any](b *imageBuilder, k layout.Kind, i int) *T {
	b.t.Helper()
	tab := b.h.Table(k)
	if uint64(i) >= tab.Count {
		b.t.Fatalf("%v[%d] of %d", k, i, tab.Count)
	}
	p, err := memview.At[T](b.buf, tab.EntryOffset(uint64(i)))
	if err != nil {
		b.t.Fatal(err)
	}
	return p
}

// claim records a claim of entry i of table k (owner slots or upgrade
// mutexes) under name, with a reference of each of holders.
func (b *imageBuilder) claim(k, dk layout.Kind, i int, name string, use uint32, holders ...uint64) {
	d := entry[layout.DirEntry](b, dk, i)
	copy(d.Name[:], name)
	d.NameLen.Store(uint32(len(name)))
	d.Use.Store(use)
	d.Claimer.Store(holders[0])
	d.Refs.Store(uint32(len(holders)))
	d.State.Store(layout.DirClaimed)
	for _, o := range holders {
		r := b.freeClaimRef()
		r.Target.Store(layout.ClaimTarget(k, i))
		r.Count.Store(1)
		r.Owner.Store(o)
	}
}

func (b *imageBuilder) freeClaimRef() *layout.ClaimRef {
	for j := range int(b.h.Table(layout.KindClaimRefs).Count) {
		if r := entry[layout.ClaimRef](b, layout.KindClaimRefs, j); r.Owner.Load() == 0 {
			return r
		}
	}
	b.t.Fatal("no free claim reference")
	return nil
}

// imageReader reads an image as bytes, at docs/FORMAT.md's offsets.
type imageReader struct {
	t *testing.T
	b []byte
	h layout.Header
}

// at is the offset of byte off of entry i of table k.
func (r imageReader) at(k layout.Kind, i int, off int) int {
	tab := r.h.Table(k)
	if uint64(i) >= tab.Count {
		r.t.Fatalf("%v[%d] of %d", k, i, tab.Count)
	}
	return int(tab.EntryOffset(uint64(i))) + off
}

func (r imageReader) u64(base, off int) uint64 { return binary.LittleEndian.Uint64(r.b[base+off:]) }
func (r imageReader) u32(base, off int) uint32 { return binary.LittleEndian.Uint32(r.b[base+off:]) }

// words checks the words of entry i of table k: offset within the entry,
// then the value, 64-bit words given as uint64, 32-bit ones as uint32.
func (r imageReader) words(k layout.Kind, i int, want ...any) {
	r.t.Helper()
	for j := 0; j+1 < len(want); j += 2 {
		off := want[j].(int)
		switch w := want[j+1].(type) {
		case uint64:
			if got := r.u64(r.at(k, i, 0), off); got != w {
				r.t.Errorf("%v[%d] +%d: got %#x, want %#x", k, i, off, got, w)
			}
		case uint32:
			if got := r.u32(r.at(k, i, 0), off); got != w {
				r.t.Errorf("%v[%d] +%d: got %#x, want %#x", k, i, off, got, w)
			}
		case string:
			if got := string(bytes.TrimRight(r.b[r.at(k, i, off):r.at(k, i, off)+len(w)+8], "\x00")); got != w {
				r.t.Errorf("%v[%d] +%d: got %q, want %q", k, i, off, got, w)
			}
		default:
			r.t.Fatalf("words: %T", w)
		}
	}
}

// zero checks that entry i of table k is all zero.
func (r imageReader) zero(k layout.Kind, i int) {
	r.t.Helper()
	start, size := r.at(k, i, 0), int(k.EntrySize())
	if !allZero(r.b[start : start+size]) {
		r.t.Errorf("%v[%d]: got %x, want all zero", k, i, r.b[start:start+size])
	}
}

// claimRefs checks the claim references: target -> owner -> count.
func (r imageReader) claimRefs(want map[uint32]map[uint64]uint32) {
	r.t.Helper()
	got := map[uint32]map[uint64]uint32{}
	for j := range int(r.h.Table(layout.KindClaimRefs).Count) {
		base := r.at(layout.KindClaimRefs, j, 0)
		owner, target, count := r.u64(base, 0), r.u32(base, 8), r.u32(base, 12)
		if owner == 0 {
			continue
		}
		if got[target] == nil {
			got[target] = map[uint64]uint32{}
		}
		got[target][owner] += count
	}
	if len(got) != len(want) {
		r.t.Errorf("claim references: got %v, want %v", got, want)
	}
	for target, owners := range want {
		for o, n := range owners {
			if got[target][o] != n {
				r.t.Errorf("claim references of %#x by %#x: got %d, want %d", target, o, got[target][o], n)
			}
		}
	}
}

// Owner slots: "queue" held in pid/tid mode by the live holder, "jobs"
// held by the dead one (with a re-entry), "tokened" held in token mode,
// and a free slot.
func fillOwnerSlots(b *imageBuilder) {
	s := entry[layout.OwnerSlot](b, layout.KindOwnerSlots, 0)
	s.PID.Store(liveHolder)
	s.TID.Store(holderTID)
	s.Token.Store(3) // generation: three releases so far
	b.claim(layout.KindOwnerSlots, layout.KindSlotDirectory, 0, "queue", 1, liveHolder)

	s = entry[layout.OwnerSlot](b, layout.KindOwnerSlots, 1)
	s.PID.Store(deadHolder)
	s.TID.Store(deadTID)
	s.Token.Store(7)
	s.RecursionCount.Store(1)
	b.claim(layout.KindOwnerSlots, layout.KindSlotDirectory, 1, "jobs", 1, deadHolder)

	s = entry[layout.OwnerSlot](b, layout.KindOwnerSlots, 2)
	s.Token.Store(heldToken)
	b.claim(layout.KindOwnerSlots, layout.KindSlotDirectory, 2, "tokened", 2, liveHolder, deadHolder)
}

func checkOwnerSlots(t *testing.T, r imageReader) {
	// OwnerSlot: PID +0, TID +8, Token +16, RecursionCount +24, Pad +28.
	r.words(layout.KindOwnerSlots, 0, 0, uint64(liveHolder), 8, uint64(holderTID), 16, uint64(3), 24, uint32(0), 28, uint32(0))
	r.words(layout.KindOwnerSlots, 1, 0, uint64(deadHolder), 8, uint64(deadTID), 16, uint64(7), 24, uint32(1))
	r.words(layout.KindOwnerSlots, 2, 0, uint64(0), 8, uint64(0), 16, uint64(heldToken))
	r.zero(layout.KindOwnerSlots, 3)
	// DirEntry: State +0, Refs +4, NameLen +8, Use +12, Claimer +16, Name +24.
	r.words(layout.KindSlotDirectory, 0, 0, layout.DirClaimed, 4, uint32(1), 8, uint32(5), 12, uint32(1), 16, uint64(liveHolder), 24, "queue")
	r.words(layout.KindSlotDirectory, 1, 0, layout.DirClaimed, 4, uint32(1), 8, uint32(4), 12, uint32(1), 16, uint64(deadHolder), 24, "jobs")
	r.words(layout.KindSlotDirectory, 2, 0, layout.DirClaimed, 4, uint32(2), 8, uint32(7), 12, uint32(2), 16, uint64(liveHolder), 24, "tokened")
	r.zero(layout.KindSlotDirectory, 3)
	r.claimRefs(map[uint32]map[uint64]uint32{
		1<<24 | 0: {liveHolder: 1},
		1<<24 | 1: {deadHolder: 1},
		1<<24 | 2: {liveHolder: 1, deadHolder: 1},
	})
}

// Upgrade mutexes: "table" with its unique lock held by the live holder;
// "index" with shared holds of both holders and the upgrade lock held by
// the dead one.
func fillUpgrades(b *imageBuilder) {
	u := entry[layout.UpgradeEntry](b, layout.KindUpgrades, 0)
	u.State.Store(1 << 31) // write: the unique lock
	u.Writer.Store(liveHolder)
	u.WriterTID.Store(holderTID)
	u.Generation.Store(2)
	b.claim(layout.KindUpgrades, layout.KindUpgradeDirectory, 0, "table", 0, liveHolder)

	u = entry[layout.UpgradeEntry](b, layout.KindUpgrades, 1)
	u.State.Store(1 << 30) // upgrade
	u.Upgrader.Store(deadHolder)
	u.UpgraderTID.Store(deadTID)
	u.Generation.Store(5)
	r0 := entry[layout.ReaderRecord](b, layout.KindUpgradeReaders, 2) // mutex 1, record 0
	r0.Owner.Store(liveHolder)
	r0.Count.Store(2)
	r0.Pad.Store(0b11) // the drain mask: records 0 and 1 were claimed
	r1 := entry[layout.ReaderRecord](b, layout.KindUpgradeReaders, 3)
	r1.Owner.Store(deadHolder)
	r1.Count.Store(1)
	b.claim(layout.KindUpgrades, layout.KindUpgradeDirectory, 1, "index", 0, liveHolder, deadHolder)
}

func checkUpgrades(t *testing.T, r imageReader) {
	if got := r.h.ReadersPerUpgrade(); got != 2 {
		t.Errorf("readers per mutex: got %d, want 2", got)
	}
	// UpgradeEntry: State +0, Writer +16, WriterTID +24, Upgrader +32,
	// UpgraderTID +40, Generation +48.
	r.words(layout.KindUpgrades, 0, 0, uint32(1<<31), 16, uint64(liveHolder), 24, uint64(holderTID), 32, uint64(0), 48, uint64(2))
	r.words(layout.KindUpgrades, 1, 0, uint32(1<<30), 16, uint64(0), 32, uint64(deadHolder), 40, uint64(deadTID), 48, uint64(5))
	// ReaderRecord: Owner +0, Count +8, Pad +12; mutex i's records are
	// entries [2i, 2i+2).
	r.zero(layout.KindUpgradeReaders, 0)
	r.zero(layout.KindUpgradeReaders, 1)
	r.words(layout.KindUpgradeReaders, 2, 0, uint64(liveHolder), 8, uint32(2), 12, uint32(0b11))
	r.words(layout.KindUpgradeReaders, 3, 0, uint64(deadHolder), 8, uint32(1), 12, uint32(0))
	r.words(layout.KindUpgradeDirectory, 0, 0, layout.DirClaimed, 4, uint32(1), 24, "table")
	r.words(layout.KindUpgradeDirectory, 1, 0, layout.DirClaimed, 4, uint32(2), 24, "index")
	r.claimRefs(map[uint32]map[uint64]uint32{
		3<<24 | 0: {liveHolder: 1},
		3<<24 | 1: {liveHolder: 1, deadHolder: 1},
	})
}

// lockMgrHash is docs/FORMAT.md's hash of a name: FNV-1a over its
// little-endian words (the words holding the name), each step followed by
// h ^= h >> 29, then a 64-bit finaliser; never 0.
func lockMgrHash(name string) uint64 {
	var buf [layout.LockMgrNameLen]byte
	copy(buf[:], name)
	h := uint64(14695981039346656037)
	for i := 0; i < (len(name)+7)/8; i++ {
		h = (h ^ binary.LittleEndian.Uint64(buf[8*i:])) * 1099511628211
		h ^= h >> 29
	}
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 32
	if h == 0 {
		h = 1
	}
	return h
}

// The lock manager's resources of the image, placed along their probe
// sequences in this order.
var lockResources = []struct {
	name   string
	mode   uint32 // 1 exclusive, 2 collaborative
	holds  []lockHold
	grants uint64
}{
	{"build/cache", 1, []lockHold{{liveHolder, "ci-1", 1_000_000_000, 0}}, 1},
	{"deploy", 2, []lockHold{{liveHolder, "alice", 2_000_000_000, 62_000_000_000}, {deadHolder, "bob", 3_000_000_000, 0}}, 2},
}

type lockHold struct {
	process           uint64
	owner             string
	acquired, expires uint64
}

// lockPlacement is where each resource lives: the first never-used entry
// of its probe sequence 1 + ((hash mod n) + d) mod n, in insertion order.
func lockPlacement(entries int) (at []int, longest int) {
	n := entries - 1
	used := map[int]bool{}
	for _, res := range lockResources {
		h := lockMgrHash(res.name)
		for d := range n {
			i := 1 + int((h%uint64(n)+uint64(d))%uint64(n))
			if !used[i] {
				used[i] = true
				at = append(at, i)
				longest = max(longest, d)
				break
			}
		}
	}
	return at, longest
}

func fillLockMgr(b *imageBuilder) {
	n := int(b.h.Table(layout.KindLockMgr).Count)
	at, longest := lockPlacement(n)
	head := entry[layout.LockMgrEntry](b, layout.KindLockMgr, 0)
	head.Next.Store(uint32(longest))
	for k, res := range lockResources {
		e := entry[layout.LockMgrEntry](b, layout.KindLockMgr, at[k])
		for i, w := range layout.NameWords(res.name) {
			e.Name[i].Store(w)
		}
		e.Hash.Store(lockMgrHash(res.name))
		e.Version.Store(res.grants) // one bump per grant, none ended yet
		e.Grants.Store(res.grants)
		for j, hold := range res.holds {
			h := &e.Holders[j]
			var owner [layout.LockMgrOwnerLen]byte
			copy(owner[:], hold.owner)
			for w := range h.Owner {
				h.Owner[w].Store(binary.LittleEndian.Uint64(owner[8*w:]))
			}
			h.Acquired.Store(hold.acquired)
			h.Expires.Store(hold.expires)
			h.Process.Store(hold.process)
		}
		e.Ctl.Store(1 | res.mode<<3) // a resource, its holders' mode
	}
}

func checkLockMgr(t *testing.T, r imageReader) {
	n := int(r.h.Table(layout.KindLockMgr).Count)
	at, longest := lockPlacement(n)
	// LockMgrEntry: Lock +0, Ctl +8, Next +20, Version +24, Hash +32,
	// Grants +48, Name +88, Holders +128 (64 bytes each: Process +0,
	// Companion +8, Acquired +16, Expires +24, Owner +32).
	r.words(layout.KindLockMgr, 0, 0, uint64(0), 8, uint32(0), 20, uint32(longest), 24, uint64(0))
	for k, res := range lockResources {
		r.words(layout.KindLockMgr, at[k], 0, uint64(0), 8, 1|res.mode<<3, 20, uint32(0), 24, res.grants,
			32, lockMgrHash(res.name), 48, res.grants, 88, res.name)
		for j := range layout.LockMgrHolders {
			base := 128 + 64*j
			if j >= len(res.holds) {
				r.words(layout.KindLockMgr, at[k], base, uint64(0), base+8, uint64(0))
				continue
			}
			h := res.holds[j]
			r.words(layout.KindLockMgr, at[k], base, h.process, base+8, uint64(0), base+16, h.acquired, base+24, h.expires, base+32, h.owner)
		}
	}
	used := map[int]bool{0: true}
	for _, i := range at {
		used[i] = true
	}
	for i := range n {
		if !used[i] {
			r.zero(layout.KindLockMgr, i)
		}
	}
}

// Transactions: record 0 open, owned by the live holder, with one object
// ("hello") and a pin of the live holder; record 1 open, owned by the dead
// holder, pinned by it. The txn arena: a 128-byte control area, then the
// pin table (rows of 64 bytes for 2 records: identity, 2 record pins, 1
// global pin; 32 rows, half the arena at most), then the data area.
const (
	txnRowSize   = 64
	txnRows      = 32
	txnDataStart = 128 + txnRows*txnRowSize
	txnObjMagic  = 0x7478_6f62 // "txob"
)

func fillTxn(b *imageBuilder) {
	arena := b.h.Table(layout.KindTxnArena)
	u64 := func(off uint64) []byte { return b.buf[arena.Offset+off:] }
	rec := func(i int) []byte { return b.buf[b.h.Table(layout.KindTxnRecords).EntryOffset(uint64(i)):] }

	// Record 0: Ctl (state 1 open, generation 1), Owner, Arena (units 0-1),
	// Used (one 16-byte header and 16 bytes of data), Objs.
	le.PutUint64(rec(0)[0:], 1|1<<32)
	le.PutUint64(rec(0)[8:], liveHolder)
	le.PutUint64(rec(0)[16:], 0|2<<32)
	le.PutUint32(rec(0)[24:], 32)
	le.PutUint32(rec(0)[28:], 1)
	// The object at offset 0 of its arena: kind 1 (object), state 0
	// (live), 5 bytes; capacity 16; check magic ^ offset.
	le.PutUint64(u64(txnDataStart), 1|5<<32)
	le.PutUint32(u64(txnDataStart+8), 16)
	le.PutUint32(u64(txnDataStart+12), txnObjMagic^0)
	copy(u64(txnDataStart+16), "hello")

	// Record 1: open, generation 1, owned by the dead holder, units 2-3,
	// nothing allocated.
	le.PutUint64(rec(1)[0:], 1|1<<32)
	le.PutUint64(rec(1)[8:], deadHolder)
	le.PutUint64(rec(1)[16:], 2|2<<32)

	// Pin rows: the live holder pins record 0, the dead holder record 1.
	le.PutUint64(u64(128), liveHolder)
	le.PutUint32(u64(128+8+4*0), 1)
	le.PutUint64(u64(128+txnRowSize), deadHolder)
	le.PutUint32(u64(128+txnRowSize+8+4*1), 1)
}

func checkTxn(t *testing.T, r imageReader) {
	if got := r.h.Table(layout.KindTxnArena).Size(); got != 4096 || got/2 < txnRows*txnRowSize {
		t.Fatalf("txn arena: got %d bytes, want 4096 with room for %d pin rows", got, txnRows)
	}
	// TxnRecord: Ctl +0, Owner +8, Arena +16, Used +24, Objs +28.
	r.words(layout.KindTxnRecords, 0, 0, uint64(1|1<<32), 8, uint64(liveHolder), 16, uint64(2<<32), 24, uint32(32), 28, uint32(1))
	r.words(layout.KindTxnRecords, 1, 0, uint64(1|1<<32), 8, uint64(deadHolder), 16, uint64(2|2<<32), 24, uint32(0), 28, uint32(0))
	r.words(layout.KindTxnArena, 0, 0, uint64(0)) // the barrier is down
	base := int(r.h.Table(layout.KindTxnArena).Offset)
	for _, w := range []struct {
		off  int
		want uint64
	}{
		{128, liveHolder}, {128 + 8, 1}, // row 0: identity, pins of record 0 (low word) and 1 (high word)
		{128 + txnRowSize, deadHolder}, {128 + txnRowSize + 8, 1 << 32},
		{txnDataStart, 1 | 5<<32}, {txnDataStart + 8, txnObjMagic<<32 | 16},
		{txnDataStart + 16, uint64(binary.LittleEndian.Uint64([]byte("hello\x00\x00\x00")))},
	} {
		if got := r.u64(base, w.off); got != w.want {
			t.Errorf("txn arena +%d: got %#x, want %#x", w.off, got, w.want)
		}
	}
}

// Data regions: "queue" (100 bytes, a counter of 42 in its first word and
// "hello" after it), "stats" (64 bytes) and "größe" (1 byte) claimed, and a
// fourth entry that the dead holder was claiming when it died: its name and
// size written, State not, and the registry lock still its.
func fillDataRegions(b *imageBuilder) {
	data := b.h.Table(layout.KindData)
	for i, r := range []layout.RegionDesc{{Name: "queue", Offset: 0, Size: 100}, {Name: "stats", Offset: 128, Size: 64}, {Name: "größe", Offset: 192, Size: 1}} {
		e := entry[layout.RegionEntry](b, layout.KindRegionDirectory, i)
		for w, v := range layout.NameWords(r.Name) {
			e.Name[w].Store(v)
		}
		e.NameLen.Store(uint32(len(r.Name)))
		e.Offset.Store(r.Offset)
		e.Size.Store(r.Size)
		e.State.Store(layout.RegionClaimed)
	}
	le.PutUint64(b.buf[data.Offset:], 42)
	copy(b.buf[data.Offset+8:], "hello")

	torn := entry[layout.RegionEntry](b, layout.KindRegionDirectory, 3)
	for w, v := range layout.NameWords("half") {
		torn.Name[w].Store(v)
	}
	torn.NameLen.Store(4)
	le.PutUint64(b.buf[layout.OffRegistry:], deadHolder)
}

func checkDataRegions(t *testing.T, r imageReader) {
	// RegionEntry: State +0, NameLen +4, Offset +8, Size +16, Name +24.
	r.words(layout.KindRegionDirectory, 0, 0, layout.RegionClaimed, 4, uint32(5), 8, uint64(0), 16, uint64(100), 24, "queue")
	r.words(layout.KindRegionDirectory, 1, 0, layout.RegionClaimed, 4, uint32(5), 8, uint64(128), 16, uint64(64), 24, "stats")
	r.words(layout.KindRegionDirectory, 2, 0, layout.RegionClaimed, 4, uint32(len("größe")), 8, uint64(192), 16, uint64(1), 24, "größe")
	r.words(layout.KindRegionDirectory, 3, 0, layout.RegionFree, 4, uint32(4), 8, uint64(0), 16, uint64(0), 24, "half")
	if got := r.u64(layout.OffRegistry, 0); got != deadHolder {
		t.Errorf("registry lock: got %#x, want the dead claimant %#x", got, uint64(deadHolder))
	}
	data := int(r.h.Table(layout.KindData).Offset)
	if got := r.u64(data, 0); got != 42 {
		t.Errorf("queue's first word: got %d, want 42", got)
	}
	start := int(r.h.Table(layout.KindRegionDirectory).Offset)
	dir := r.b[start : start+int(r.h.Table(layout.KindRegionDirectory).Size())]
	tab := layout.DecodeRegions(dir, r.h.Table(layout.KindData).Size())
	if len(tab.Regions) != 3 || !tab.Sound || tab.Free != 3 || tab.End != 256 || len(tab.Problems) != 0 || !slices.Equal(tab.Abandoned, []int{3}) {
		t.Errorf("DecodeRegions: got %+v, want 3 regions, sound, entry 3 free, end 256, no problem, entry 3 abandoned (the torn entry)", tab)
	}
}
