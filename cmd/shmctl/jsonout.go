package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/shmlock/shmlock/internal/peerwork"
)

// The --json documents, one struct per document and per object in it.
// docs/JSON.md describes every field of every document: this is its
// schema 1 (schemaVersion). Within a schema, a field may be added but never
// renamed, removed or given another type or meaning: scripts depend on
// them. The conventions, which the types below follow:
//
//   - every document opens with docHeader: "schema" and "command";
//   - a process is a *processJSON, null where there is none; its liveness
//     is the only word for whether it lives;
//   - absent values are null (a pointer), never "-", "none", "" or 0;
//   - 64-bit identifiers (tids, tokens, generations) are decimal strings,
//     exact in jq and JavaScript (idString);
//   - durations are float seconds in keys ending in _seconds, sizes bytes
//     in keys ending in _bytes, times RFC 3339 in UTC;
//   - the text tables name their columns after the JSON keys.
//
// TestJSONDocs checks docs/JSON.md against these types, and the golden
// files of testdata/json pin each command's output.

// schemaVersion is the "schema" of every document shmctl prints.
const schemaVersion = 1

// docHeader opens every document: the schema it follows and the command
// that printed it, so that a stream of documents (--watch in a pipe) or a
// stored one says what it is.
type docHeader struct {
	Schema  int    `json:"schema"`
	Command string `json:"command"`
}

// header is the docHeader of command's document.
func header(command string) docHeader {
	return docHeader{Schema: schemaVersion, Command: command}
}

// processJSON is every process a document names: a segment's creator, a
// lock's holder, a reader, a transaction's owner, a pin row's process.
type processJSON struct {
	PID        uint32     `json:"pid"`
	StartTicks uint64     `json:"start_ticks"` // fewer than proc.StartBits bits
	Started    *time.Time `json:"started"`     // nil when liveness is stale
	Liveness   string     `json:"liveness"`    // one of the liveness* constants
}

// A process's liveness: the one word for whether it lives.
const (
	livenessAlive = "alive" // the recorded process (pid and start time) runs
	livenessDead  = "dead"  // it exited, or its pid now names another process
	livenessStale = "stale" // recorded under a previous boot: dead too
	// livenessUnknown: the segment was made in another PID namespace, so
	// its pids name other processes here (only info opens such a segment);
	// or a leftover's hidden name says its process is of another, which
	// this one cannot judge (shm.ErrForeignNamespace).
	livenessUnknown = "unknown"
)

// idString writes a 64-bit identifier as the documents carry it: a
// decimal string, since a JSON number above 2^53 is rounded by jq and
// JavaScript.
func idString(v uint64) string { return strconv.FormatUint(v, 10) }

// optID is idString(v), or nil (null) for 0, the words' "none".
func optID(v uint64) *string {
	if v == 0 {
		return nil
	}
	s := idString(v)
	return &s
}

// optName is a claimed entry's name, or nil if the entry is not claimed.
func optName(name string, claimed bool) *string {
	if !claimed {
		return nil
	}
	return &name
}

type (
	// infoJSON is what info and create print.
	infoJSON struct {
		docHeader
		Path             string       `json:"path"`
		FormatVersion    uint32       `json:"format_version"`
		TotalBytes       uint64       `json:"total_bytes"`
		Created          time.Time    `json:"created"`
		Creator          *processJSON `json:"creator"`
		BootID           string       `json:"boot_id"`
		CurrentBoot      bool         `json:"current_boot"`
		PIDNamespace     string       `json:"pid_namespace"` // an inode number, 64 bits
		SamePIDNamespace bool         `json:"same_pid_namespace"`
		GroupAccess      bool         `json:"group_access"`
		Tables           []tableJSON  `json:"tables"`
	}
	tableJSON struct {
		Kind       string `json:"kind"`
		EntryBytes uint32 `json:"entry_bytes"`
		Entries    uint64 `json:"entries"`
		Capacity   uint64 `json:"capacity"`
		Offset     uint64 `json:"offset"`
		Bytes      uint64 `json:"bytes"`
		Claimed    *int   `json:"claimed"`
	}
	// dataJSON is what data --json prints.
	dataJSON struct {
		docHeader
		Path             string       `json:"path"`
		AreaBytes        int          `json:"area_bytes"`
		UsedBytes        int          `json:"used_bytes"`
		FreeBytes        int          `json:"free_bytes"`
		DirectoryEntries int          `json:"directory_entries"`
		Regions          []regionJSON `json:"regions"`
	}
	regionJSON struct {
		Index  int    `json:"index"`
		Name   string `json:"name"`
		Offset int    `json:"offset"`
		Bytes  int    `json:"bytes"`
	}
	// versionJSON is what version --json prints.
	versionJSON struct {
		docHeader
		ShmctlVersion string `json:"shmctl_version"`
		FormatVersion uint32 `json:"format_version"`
	}
	reclaimJSON struct {
		docHeader
		Path    string              `json:"path"`
		DryRun  bool                `json:"dry_run"`
		Slots   []reclaimSlotJSON   `json:"slots"`
		Txns    []reclaimTxnJSON    `json:"txns"`
		RWLocks []reclaimRWLockJSON `json:"rwlocks"`
		Locks   []reclaimLockJSON   `json:"locks"`
		// TokenSlots are token-mode slots held by a holder no slot
		// records: reclaim cannot know whether it lives, and frees none.
		TokenSlots []reclaimTokenJSON `json:"token_slots"`
		// Claims are the references dead processes held to named slots and
		// mutexes, dropped (a claim whose last reference goes is freed if
		// its lock is free, or held by dead processes only).
		Claims []reclaimClaimJSON `json:"claims"`
		// Leftovers are the files of the segment that removers moved
		// aside and were killed before they removed them (shm.Leftover).
		Leftovers []reclaimLeftoverJSON `json:"leftovers"`
	}
	reclaimLeftoverJSON struct {
		Path    string       `json:"path"`
		Name    *string      `json:"name"`
		Process *processJSON `json:"process"`
		// PIDNamespace is the process's PID namespace (an inode number,
		// 64 bits), nil where the hidden name does not say (the
		// previous release's).
		PIDNamespace *string `json:"pid_namespace"`
		Users        []int   `json:"users"`
		Action       string  `json:"action"`
		Error        *string `json:"error"`
		// pending: a creator's pending file (.shmlock-init-...), which
		// the document tells by its path and its null name.
		pending bool
	}
	reclaimClaimJSON struct {
		Table   string       `json:"table"`
		Index   int          `json:"index"`
		Name    *string      `json:"name"`
		Process *processJSON `json:"process"`
		Count   uint32       `json:"count"`
		Action  string       `json:"action"`
	}
	reclaimTokenJSON struct {
		Index  int     `json:"index"`
		Name   *string `json:"name"`
		Token  string  `json:"token"`
		Action string  `json:"action"`
	}
	// reclaimLockJSON is a lock-manager hold reclaim ended (or would).
	reclaimLockJSON struct {
		Resource string       `json:"resource"`
		Owner    string       `json:"owner"`
		Process  *processJSON `json:"process"`
		Why      string       `json:"why"` // expired or dead
		Action   string       `json:"action"`
	}
	reclaimTxnJSON struct {
		Index      int          `json:"index"`
		Generation string       `json:"generation"`
		Mode       string       `json:"mode"`
		Process    *processJSON `json:"process"`
		Action     string       `json:"action"`
	}
	reclaimRWLockJSON struct {
		Index   int          `json:"index"`
		Name    *string      `json:"name"`
		Role    string       `json:"role"` // writer, upgrader or reader
		Record  *int         `json:"record"`
		Process *processJSON `json:"process"`
		TID     *string      `json:"tid"`
		Count   uint32       `json:"count"`
		Unique  bool         `json:"unique"`
		Action  string       `json:"action"`
	}
	rwlocksJSON struct {
		docHeader
		Path    string       `json:"path"`
		RWLocks []rwlockJSON `json:"rwlocks"`
	}
	rwlockJSON struct {
		Index         int          `json:"index"`
		Name          *string      `json:"name"`
		Refs          uint32       `json:"refs"`
		Held          string       `json:"held"`
		StateWord     uint32       `json:"state_word"`
		WriteBit      bool         `json:"write_bit"`
		UpgradeBit    bool         `json:"upgrade_bit"`
		Pending       bool         `json:"pending"`
		Writer        *holderJSON  `json:"writer"`
		WriterWaiting bool         `json:"writer_waiting"`
		Handoff       bool         `json:"handoff"`
		Upgrader      *holderJSON  `json:"upgrader"`
		SharedHolds   uint64       `json:"shared_holds"`
		Readers       []readerJSON `json:"readers"`
		ReaderRecords int          `json:"reader_records"`
		SharedWaiters uint32       `json:"shared_waiters"`
		UniqueWaiters uint32       `json:"unique_waiters"`
		WriterWaiters uint32       `json:"writer_waiters"`
		Generation    string       `json:"generation"`
		Inconsistent  bool         `json:"inconsistent"`
		Dead          int          `json:"dead"`
	}
	// holderJSON is an upgrade mutex's writer or upgrade holder.
	holderJSON struct {
		Process *processJSON `json:"process"`
		TID     *string      `json:"tid"`
	}
	readerJSON struct {
		Record  int          `json:"record"`
		Process *processJSON `json:"process"`
		Count   uint32       `json:"count"`
	}
	reclaimSlotJSON struct {
		Index         int          `json:"index"`
		Name          *string      `json:"name"`
		Process       *processJSON `json:"process"`
		TID           *string      `json:"tid"`
		Generation    string       `json:"generation"`
		NewGeneration *string      `json:"new_generation"`
		Action        string       `json:"action"`
	}
	// checkJSON is what check finds.
	checkJSON struct {
		docHeader
		Path     string   `json:"path"`
		OK       bool     `json:"ok"`
		Findings []string `json:"findings"`
		// Notes are what is no damage but worth knowing: claims that
		// dead claimants did not finish (shm.Segment.AbandonedClaims).
		Notes []string `json:"notes"`
	}
	// unlockJSON says what unlock --force freed.
	unlockJSON struct {
		docHeader
		Path    string             `json:"path"`
		Kind    string             `json:"kind"`
		Name    string             `json:"name"`
		Holders []unlockHolderJSON `json:"holders"`
		// Waiting are the acquisitions in progress the force left (an
		// upgrade mutex's writer or seeker that held its word, not
		// granted): upgrade.Forced.WaitingWriter, WaitingUpgrader.
		Waiting []unlockHolderJSON `json:"waiting"`
		// Generation is the lock's fencing generation (version) after the
		// unlock: every token of the old holders is below it. nil for a
		// token-mode slot, which has none.
		Generation *string `json:"generation"`
		Action     string  `json:"action"`
	}
	// unlockHolderJSON is one holder unlock --force freed the lock of.
	unlockHolderJSON struct {
		Role    string       `json:"role"`    // the unlockRole* constants
		Owner   *string      `json:"owner"`   // a lock-manager hold's owner name
		Process *processJSON `json:"process"` // nil for a token-mode holder
		TID     *string      `json:"tid"`
		Token   *string      `json:"token"`
		Count   *uint32      `json:"count"` // a reader's shared holds
	}
	// benchJSON is the peer-benchmark contract's line, whose keys and
	// their order the contract fixes: no docHeader.
	benchJSON = peerwork.Line
	txnsJSON  struct {
		docHeader
		Path          string        `json:"path"`
		Records       int           `json:"records"`
		DataBytes     uint64        `json:"data_bytes"`
		FreeBytes     uint64        `json:"free_bytes"`
		BarrierLeader *processJSON  `json:"barrier_leader"`
		Txns          []txnJSON     `json:"txns"`
		Processes     []txnProcJSON `json:"processes"`
	}
	txnJSON struct {
		Index         int           `json:"index"`
		Generation    string        `json:"generation"`
		State         string        `json:"state"`
		Mode          string        `json:"mode"`
		Process       *processJSON  `json:"process"`
		ArenaOffset   *uint64       `json:"arena_offset"` // nil without an arena
		ArenaBytes    uint64        `json:"arena_bytes"`
		UsedBytes     uint64        `json:"used_bytes"`
		Objects       uint32        `json:"objects"`
		Promotions    uint32        `json:"promotions"`
		Promoted      uint32        `json:"promoted"`
		Destroyed     uint32        `json:"destroyed"`
		Pins          uint64        `json:"pins"`
		PinsByProcess []txnPinsJSON `json:"pins_by_process"`
	}
	txnPinsJSON struct {
		Process *processJSON `json:"process"`
		Pins    uint32       `json:"pins"`
	}
	txnProcJSON struct {
		Row        int          `json:"row"`
		Process    *processJSON `json:"process"`
		Pins       uint64       `json:"pins"`
		GlobalPins uint32       `json:"global_pins"`
	}
	slotsJSON struct {
		docHeader
		Path  string     `json:"path"`
		Slots []slotJSON `json:"slots"`
	}
	slotJSON struct {
		Index      int          `json:"index"`
		Name       *string      `json:"name"`
		Refs       uint32       `json:"refs"`
		Mode       string       `json:"mode"`
		Process    *processJSON `json:"process"`
		TID        *string      `json:"tid"`
		Token      *string      `json:"token"`      // token mode's holder
		Generation *string      `json:"generation"` // pid/tid mode's
		Recursion  uint32       `json:"recursion"`
		Waiters    uint32       `json:"waiters"`
		// Inconsistent: a holder died holding the lock and no holder has
		// said since that it repaired the data (spinlock.Guard.MarkConsistent).
		Inconsistent bool `json:"inconsistent"`
	}
	locksJSON struct {
		docHeader
		Path         string     `json:"path"`
		DeclaredOnly bool       `json:"declared_only"`
		Capacity     *int       `json:"capacity"` // nil in etcd: no fixed capacity
		Resources    []lockJSON `json:"resources"`
	}
	lockJSON struct {
		Resource     string           `json:"resource"`
		Mode         *string          `json:"mode"` // nil when nobody holds it
		State        string           `json:"state"`
		Generation   string           `json:"generation"` // lockmgr's version
		Declared     bool             `json:"declared"`
		Inconsistent bool             `json:"inconsistent"`
		Holders      []lockHolderJSON `json:"holders"`
	}
	lockHolderJSON struct {
		Owner       string       `json:"owner"`
		Process     *processJSON `json:"process"`
		Host        *string      `json:"host"` // etcd: the holder's host; nil for a segment (this host)
		Companion   *processJSON `json:"companion"`
		State       string       `json:"state"`
		Acquired    time.Time    `json:"acquired"`
		Expires     *time.Time   `json:"expires"`
		AgeSeconds  float64      `json:"age_seconds"`
		LeftSeconds *float64     `json:"left_seconds"`
	}
	statsJSON struct {
		docHeader
		Path               string  `json:"path"`
		TotalLocks         uint64  `json:"total_locks"`
		ActiveLocks        int     `json:"active_locks"`
		ExpiredLocks       uint64  `json:"expired_locks"`
		ConflictsDetected  uint64  `json:"conflicts_detected"`
		AverageHoldSeconds float64 `json:"average_hold_seconds"`
		Released           uint64  `json:"released"`
		Reclaimed          uint64  `json:"reclaimed"`
		Resources          int     `json:"resources"`
		Capacity           *int    `json:"capacity"` // nil in etcd
		DeclaredOnly       bool    `json:"declared_only"`
	}
)

// The roles of the holders unlock --force reports (unlockHolderJSON.Role).
const (
	unlockRoleHolder   = "holder" // of a slot or a resource
	unlockRoleWriter   = "writer"
	unlockRoleUpgrader = "upgrader"
	unlockRoleReader   = "reader"
)

// text is h as the table shows it: "pid:tid", "token:N", "writer PID",
// "upgrader PID", "reader PID xN", or a lock-manager owner with its pid.
func (h unlockHolderJSON) text() string {
	pid := uint32(0)
	if h.Process != nil {
		pid = h.Process.PID
	}
	switch {
	case h.Token != nil:
		return "token:" + *h.Token
	case h.Owner != nil:
		return fmt.Sprintf("%s (pid %d)", *h.Owner, pid)
	case h.Role == unlockRoleReader && h.Count != nil:
		return fmt.Sprintf("reader %d x%d", pid, *h.Count)
	case h.Role == unlockRoleHolder:
		return fmt.Sprintf("%d:%s", pid, orDash(h.TID))
	}
	return fmt.Sprintf("%s %d", h.Role, pid)
}

// writeJSON is the one way a command prints a JSON document: indented by
// two spaces, one trailing newline, and no HTML escaping of names such as
// "a<b". (bench's result, which must be one line, goes through writeJSONLine.)
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// writeJSONLine writes v as one line, for bench: the driver contract wants
// exactly one line of JSON on stdout. No HTML escaping, as writeJSON.
func writeJSONLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
