package etcdlock

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shmlock/shmlock/lockmgr"
)

// The key layout under Options.Prefix (P, "shmlock/" by default), with R
// a resource and O an owner, each escaped (see escape) so that neither
// holds a '/':
//
//	P r/R/h/x/O   an exclusive hold or waiter of O, on its lease
//	P r/R/h/c/O   a collaborative hold or waiter of O, on its lease
//	P r/R/l/O     the ledger of O's granted hold: outlives the lease
//	P r/R/t/O     tombstone of O's hold that ended without its release
//	P r/R/v       the resource's version: its mod revision
//	P r/R/i       present while the resource is inconsistent
//	P r/R/d       present while the resource is declared
//	P declared-only       present while undeclared names are refused
//	P stats/<counter>     one key per counter; the count is its Version
//	P stats/held/<id>     a Manager's total hold time (see stats.go)
//
// The h keys are the queue: ordered by create revision, an exclusive key
// is granted once no key created before it remains, a collaborative key
// once no exclusive key created before it remains. The queue entry of a
// waiter becomes its hold when it is granted, keeping its create revision.
const (
	holdSeg    = "h/"
	exclSeg    = "h/x/"
	collabSeg  = "h/c/"
	ledgerSeg  = "l/"
	tombSeg    = "t/"
	versionKey = "v"
	inconsKey  = "i"
	declKey    = "d"

	declaredOnlyKey = "declared-only"
	statsSeg        = "stats/"
	heldSeg         = "stats/held/"
)

// The counters of Stats, one key each under P stats/.
const (
	ctrGrants    = "grants"
	ctrReleases  = "releases"
	ctrConflicts = "conflicts"
	ctrExpired   = "expired"
	ctrReclaimed = "reclaimed"
)

// escape makes a name usable as one segment of a key: '%' and '/' are
// written %25 and %2F, so no name is a prefix of another's keys and a key
// stays readable in etcdctl.
func escape(s string) string {
	if !strings.ContainsAny(s, "%/") {
		return s
	}
	return strings.NewReplacer("%", "%25", "/", "%2F").Replace(s)
}

func unescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	return strings.NewReplacer("%2F", "/", "%25", "%").Replace(s)
}

// resKeys are the keys of one resource and one owner.
type resKeys struct {
	res, owner    string
	base          string // P r/R/
	excl, collab  string // P r/R/h/x/O, P r/R/h/c/O
	ledger, tomb  string
	hold          string // P r/R/h/
	exclPrefix    string // P r/R/h/x/
	ledgerPrefix  string // P r/R/l/
	version       string
	incons, decl  string
	declaredOnly  string
	statsPrefix   string
	resourcesRoot string // P r/
}

func (m *Manager) keys(resource, owner string) *resKeys {
	base := m.prefix + "r/" + escape(resource) + "/"
	k := &resKeys{res: resource, owner: owner, base: base, hold: base + holdSeg, exclPrefix: base + exclSeg,
		ledgerPrefix: base + ledgerSeg, version: base + versionKey, incons: base + inconsKey, decl: base + declKey,
		declaredOnly: m.prefix + declaredOnlyKey, statsPrefix: m.prefix + statsSeg, resourcesRoot: m.prefix + "r/"}
	if owner != "" {
		o := escape(owner)
		k.excl, k.collab = base+exclSeg+o, base+collabSeg+o
		k.ledger, k.tomb = base+ledgerSeg+o, base+tombSeg+o
	}
	return k
}

// unusedCmps hold while the resource has no hold (no ledger: none live,
// none ended unrecorded) and is not inconsistent: then, undeclared, it
// needs no version, waiters or not (see otherLedgersCmps).
func (k *resKeys) unusedCmps() []clientv3.Cmp {
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(k.ledgerPrefix), "=", 0).WithPrefix(),
		clientv3.Compare(clientv3.CreateRevision(k.incons), "=", 0),
	}
}

// otherLedgersCmps hold while the resource has no ledger but the owner's:
// no hold but the owner's, live or ended unrecorded. Then the owner's
// release leaves no hold that needs the version, even with waiters queued:
// a waiter's grant writes the version anew, and a waiter may leave with its
// session's lease (a process killed in the queue), which nobody tidies
// after. A version kept for waiters stayed for good after such a waiter,
// the resource listed, empty.
func (k *resKeys) otherLedgersCmps() []clientv3.Cmp {
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(k.ledgerPrefix), "=", 0).WithRange(k.ledger),
		clientv3.Compare(clientv3.CreateRevision(k.ledger+"\x00"), "=", 0).WithRange(clientv3.GetPrefixRangeEnd(k.ledgerPrefix)),
	}
}

// holdKey is the key of the owner's hold in mode.
func (k *resKeys) holdKey(mode lockmgr.Mode) string {
	if mode == lockmgr.Exclusive {
		return k.excl
	}
	return k.collab
}

func (m *Manager) counter(name string) string { return m.prefix + statsSeg + name }

// holdValue is the value of an h key and of a ledger: who holds, from
// where, since when, for how long. Times are the wall clock of the
// acquiring host (see the package doc on clocks).
type holdValue struct {
	Owner    string `json:"owner"`
	Mode     string `json:"mode"`
	Host     string `json:"host,omitempty"`
	PID      int    `json:"pid,omitempty"`
	Acquired int64  `json:"acquired,omitempty"` // Unix ns of the grant; 0 while waiting
	TTL      int64  `json:"ttl,omitempty"`      // seconds; 0: the session's lease
	Lease    int64  `json:"lease,omitempty"`    // the ledger's copy of the hold's lease
	Rev      int64  `json:"rev,omitempty"`      // the ledger's copy of the hold's create revision
	Tag      uint64 `json:"tag,omitempty"`      // random, per acquisition: which one wrote the key
}

func (h holdValue) mode() lockmgr.Mode {
	m, _ := lockmgr.ParseMode(h.Mode)
	return m
}

func (h holdValue) encode() string {
	b, _ := json.Marshal(h) // a struct of strings and numbers: never fails
	return string(b)
}

func decodeHold(b []byte) (holdValue, error) {
	var h holdValue
	if err := json.Unmarshal(b, &h); err != nil {
		return h, fmt.Errorf("etcdlock: malformed hold record %q: %w", b, err)
	}
	return h, nil
}

// tombValue is a tombstone's value: why the hold ended.
const (
	tombExpired = "expired"
	tombForced  = "forced"
)

// heldValue is the value of a stats/held key: a sequence number, which
// only grows, then the total in ns, both big-endian, so that comparing
// values as bytes compares the sequence numbers.
func heldValue(seq uint64, total uint64) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], seq)
	binary.BigEndian.PutUint64(b[8:], total)
	return string(b[:])
}

func heldTotal(b []byte) time.Duration {
	if len(b) != 16 {
		return 0
	}
	return time.Duration(binary.BigEndian.Uint64(b[8:]))
}

func seqBytes(seq uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], seq)
	return string(b[:])
}
