package main

import (
	"encoding/json"
	"io"
	"time"
)

// The --json documents. Their field names are a stable interface: scripts
// depend on them, so a field may be added but never renamed, removed or
// given another type. Every field is always present (null where noted).
// Times are RFC 3339 strings in UTC with nanoseconds.
//
// shmctl info --json and shmctl create --json print an infoJSON:
//
//	path                string   resolved path of the segment file
//	version             number   format version (layout.Version)
//	total_size          number   file size in bytes
//	created             time     when the segment was created
//	creator             object   the process that created it:
//	  pid               number     its pid (meaningful in its PID namespace)
//	  start_ticks       number     its start time, clock ticks since its boot
//	  started           time|null  its start time, null if not of this boot
//	  state             string     "alive", "dead", or "stale" (a previous boot)
//	  alive             bool       state == "alive"
//	boot_id             string   creator's boot id, 8-4-4-4-12 hex UUID form
//	current_boot        bool     boot_id is this machine's current boot
//	pid_namespace       number   inode of the creator's PID namespace
//	same_pid_namespace  bool     pid_namespace is ours
//	group_access        bool     the file was created 0660 (create --group)
//	tables              array    one object per table, in layout order:
//	  kind              string     "owner_slots", "slot_directory", "upgrades",
//	                               "upgrade_directory", "txn_records",
//	                               "txn_arena", "lockmgr" or
//	                               "upgrade_readers"
//	  entry_size        number     bytes per entry
//	  count             number     number of entries
//	  offset            number     byte offset in the file
//	  size              number     bytes (count * entry_size)
//	  claimed           number|null  claimed entries; for data, the 64-byte
//	                               units regions take; null for a table
//	                               without a directory (all but owner_slots,
//	                               upgrades, region_directory and data)
//
// shmctl slots --json prints a slotsJSON:
//
//	path                string   resolved path of the segment file
//	slots               array    one object per listed owner slot:
//	  index             number     slot index
//	  name              string     name it was claimed under; "" if unnamed
//	                               or not claimed
//	  refs              number     claims not yet released; 0 if not claimed
//	  mode              string     "pid/tid" or "token": the mode recorded by
//	                               spinlock.Named, else guessed: "pid/tid"
//	                               (pid != 0), "token" (pid == 0 and token
//	                               != 0) or "free"
//	  pid               number     owner's pid; 0 if none
//	  start_ticks       number     owner's start time, clock ticks since boot
//	  owner_state       string     "alive", "dead", "stale" (recorded under a
//	                               previous boot) or "none" (no owner)
//	  tid               number     holder id within the owner process
//	  token             number     token (token mode) or generation (pid/tid)
//	  recursion         number     re-entries beyond the first lock
//	  waiters           number     waiters asleep on the slot (OwnerSlot.Sleepers)
//
// shmctl rwlocks --json prints a rwlocksJSON:
//
//	path                string   resolved path of the segment file
//	rwlocks             array    one object per listed upgrade mutex:
//	  index             number     index in the upgrade table
//	  name              string     name it was claimed under; "" if unnamed
//	                               or not claimed
//	  refs              number     claims not yet released; 0 if not claimed
//	  held              string     "free", "shared", "upgrade",
//	                               "upgrade+shared", "unique" (a writer's) or
//	                               "upgraded" (the upgrade holder's unique
//	                               lock); "shared" also while a writer or an
//	                               upgrade waits for the readers to leave
//	  state             number     the raw state word (package upgrade)
//	  write_bit         bool       the state's write bit: the unique lock is
//	                               held, or taken once the readers leave
//	  upgrade_bit       bool       the state's upgrade bit: the upgrade lock
//	                               is held
//	  pending           bool       an upgrade waits for readers to leave (new
//	                               readers wait)
//	  writer            object|null  the process holding or waiting for the
//	                               unique lock (the writers' mutex); null if
//	                               none:
//	    pid             number       its pid
//	    start_ticks     number       its start time, clock ticks since boot
//	    owner_state     string       "alive", "dead" or "stale" (recorded
//	                                 under a previous boot)
//	    tid             number       the holding handle's id in its process
//	  writer_waiting    bool       writer is not null and does not hold the
//	                               unique lock yet
//	  handoff           bool       the writers' mutex was handed to the
//	                               waiting writers and none has taken it yet
//	  upgrader          object|null  the upgrade holder (or the process taking
//	                               the upgrade lock), as writer
//	  shared_holds      number     shared holds, the sum of the readers' counts
//	  readers           array      the reader records in use (one per handle
//	                               that took a shared hold):
//	    record          number       index among the mutex's records
//	    pid             number       owning process's pid
//	    start_ticks     number       its start time, clock ticks since boot
//	    owner_state     string       "alive", "dead" or "stale"
//	    count           number       its shared holds
//	  reader_records    number     reader records of the mutex, used or not
//	  shared_waiters    number     sleepers on the shared gate (readers,
//	                               upgrade seekers)
//	  unique_waiters    number     sleepers on the unique gate (a writer or
//	                               a pending upgrade waiting for readers to
//	                               leave, or a writer for the upgrade lock)
//	  writer_waiters    number     writers asleep waiting for the writers'
//	                               mutex (another writer's turn)
//	  generation        number     bumped by every release of the writer or
//	                               the upgrade holder, and every takeover
//	  dead              number     writer, upgrader and reader records whose
//	                               process is dead or stale: what reclaim frees
//
// shmctl reclaim --json prints a reclaimJSON:
//
//	path                string   resolved path of the segment file
//	dry_run             bool     --dry-run: nothing was changed
//	slots               array    one object per owner slot whose owner was
//	                             dead or stale, by index:
//	  index             number     slot index
//	  name              string     name it was claimed under; "" if unnamed
//	                               or not claimed
//	  pid               number     the dead owner's pid
//	  start_ticks       number     its start time, clock ticks since its boot
//	  owner_state       string     "dead" or "stale" (a previous boot)
//	  tid               number     the dead holder's id within its process
//	  generation        number     the slot's generation when found
//	  new_generation    number|null  the generation after the takeover and
//	                               release (normally generation + 2); null unless
//	                               action is "reclaimed"
//	  action            string     "reclaimed" (now free), "would reclaim"
//	                               (--dry-run) or "skipped" (the owner
//	                               changed before the takeover)
//	txns                array    one object per open, closing or finishing
//	                             transaction whose owner was dead or stale,
//	                             by index:
//	  index             number     record index
//	  generation        number     its generation
//	  mode              string     "pins" or "barrier" (see shmctl txns)
//	  pid               number     the dead owner's pid
//	  start_ticks       number     its start time, clock ticks since its boot
//	  owner_state       string     "dead" or "stale"
//	  action            string     "reclaimed" (closed), "would reclaim"
//	                               (--dry-run), "skipped" (closed or taken
//	                               over by someone else meanwhile) or "timed
//	                               out" (live readers kept their pins past
//	                               --wait; still open)
//	rwlocks             array    one object per dead or stale holder or
//	                             reader record of an upgrade mutex, by index
//	                             (writer, upgrader, then readers by record):
//	  index             number     index in the upgrade table
//	  name              string     name it was claimed under; "" if unnamed
//	                               or not claimed
//	  holder            string     "writer", "upgrader" or "reader"
//	  record            number|null  the reader record; null unless holder is
//	                               "reader"
//	  pid               number     the dead process's pid
//	  start_ticks       number     its start time, clock ticks since its boot
//	  owner_state       string     "dead" or "stale" (a previous boot)
//	  tid               number     the dead handle's id (writer, upgrader); 0
//	                               for a reader
//	  count             number     the shared holds freed with a reader record
//	                               (as found, with --dry-run); 0 otherwise
//	  unique            bool       the upgrader held the unique lock (the data
//	                               may be half-updated); false otherwise
//	  action            string     as for slots: "reclaimed", "would reclaim"
//	                               or "skipped"
//
// shmctl txns --json prints a txnsJSON:
//
//	path                string   resolved path of the segment file
//	records             number   transaction records in the segment
//	arena_bytes         number   bytes of the data area arenas are cut from
//	free_bytes          number   of those, not in the arena of an open,
//	                             closing or finishing transaction
//	barrier_leader      object|null  the process whose close holds the
//	                             global barrier up; null when it is down:
//	  pid               number     its pid
//	  start_ticks       number     its start time, clock ticks since boot
//	  owner_state       string     "alive", "dead" or "stale"
//	txns                array    one object per listed record, by index:
//	  index             number     record index
//	  generation        number     uses of the record so far (Ref.Gen)
//	  state             string     "open", "closing" (waiting for pins; may
//	                               still be cancelled and reopen), "finishing"
//	                               (drained, its end sequence runs; no longer
//	                               cancellable), "closed", "free" (never
//	                               used) or "corrupt"
//	  mode              string     "pins" (per-transaction pins) or
//	                               "barrier" (the global close barrier)
//	  pid               number     owner's pid (or the reclaimer's); 0 if none
//	  start_ticks       number     owner's start time, clock ticks since boot
//	  owner_state       string     "alive", "dead", "stale" or "none"
//	  arena_offset      number     byte offset of the arena in the txn arena
//	                               table; 0 unless open, closing or finishing
//	  arena_size        number     arena bytes; 0 unless open, closing or
//	                               finishing
//	  used              number     arena bytes allocated
//	  objects           number     objects and promotion cells allocated
//	  promotions        number     promotion cells registered on it (Link)
//	  promoted          number     its objects copied out at its close
//	  destroyed         number     its objects destroyed unpromoted at close
//	  pins              number     per-transaction pins of live processes
//	  pins_by_process   array      every process counting pins on it:
//	    pid             number       its pid
//	    start_ticks     number       its start time
//	    owner_state     string       "alive", "dead" or "stale": a dead
//	                                 process's pins no longer count
//	    pins            number       pins it counts
//	processes           array    one object per pin row in use:
//	  row               number     pin row
//	  pid               number     the row's process
//	  start_ticks       number     its start time
//	  owner_state       string     "alive", "dead" or "stale"
//	  pins              number     per-transaction pins, all records
//	  global_pins       number     global pins (barrier-mode transactions)
//
// shmctl locks --json prints a locksJSON:
//
//	path                string   resolved path of the segment file, or
//	                             etcd://ENDPOINTS/PREFIX with --etcd
//	declared_only       bool     only declared resources can be acquired
//	capacity            number   resources the table can hold (0 in etcd)
//	resources           array    one object per listed resource, in table order:
//	  resource          string     its name
//	  mode              string     "exclusive", "collaborative", or "-" when
//	                               nobody holds it
//	  state             string     "acquired" (a live hold), "expired" (every
//	                               hold is past its TTL, none ended yet) or
//	                               "unlocked"
//	  version           number     the resource's version: the fencing token
//	                               of its last grant; only grows
//	  declared          bool       declared (lockmgr.Manager.Declare)
//	  holders           array      one object per hold:
//	    owner           string       the owner name given to Acquire
//	    pid             number       the holding process
//	    host            string       its host (--etcd only; absent for a segment)
//	    companion_pid   number       the process whose life also keeps the
//	                                 hold (the command of shmctl lock); 0 if none
//	    alive           bool         the holding or the companion process lives
//	    state           string       "acquired" or "expired"
//	    acquired        time         when the hold was granted
//	    expires         time|null    when it expires; null if never
//	    age_seconds     number       seconds since acquired
//	    left_seconds    number|null  seconds until expires (negative once
//	                                 past); null if never
//
// shmctl stats --json prints a statsJSON (lockmgr.Stats):
//
//	path                 string  resolved path of the segment file, or
//	                             etcd://ENDPOINTS/PREFIX with --etcd
//	total_locks          number  holds ever granted
//	active_locks         number  holds now live (not past their TTL)
//	expired_locks        number  holds ended by their TTL, plus those past it
//	                             and not yet ended
//	conflicts_detected   number  acquisitions that met a conflict (once each)
//	average_hold_seconds number  mean length of the released holds
//	released             number  holds ended by a release
//	reclaimed            number  holds ended because their processes died
//	resources            number  resources in the table
//	capacity             number  resources the table can hold
//	declared_only        bool    only declared resources can be acquired
//
// shmctl bench prints a benchJSON on one line (writeJSONLine), with the
// fields in this order, as the peer-benchmark contract wants:
//
//	peer                string   "shmlock_spin", "shmlock_spin_token" or
//	                             "shmlock_upgrade"
//	workload            string   as given
//	procs               number   worker processes
//	iters               number   iterations per worker
//	seconds             number   max(worker end) - start, CLOCK_MONOTONIC
//	ops_per_sec         number   ops / seconds; ops is procs*iters (counter),
//	                             iters lock/unlock pairs (uncontended) or
//	                             iters round trips (pingpong*); 0 if not run
//	ns_per_op           number   1e9 * seconds / ops; 0 if not run
//	ok                  bool     every worker succeeded and the run validated
//	detail              string   the lock's mode and shmlock's version, then
//	                             what was checked ("counter=N want=N"), or
//	                             why the cell did not run ("unsupported workload")
type (
	infoJSON struct {
		Path             string      `json:"path"`
		Version          uint32      `json:"version"`
		TotalSize        uint64      `json:"total_size"`
		Created          time.Time   `json:"created"`
		Creator          creatorJSON `json:"creator"`
		BootID           string      `json:"boot_id"`
		CurrentBoot      bool        `json:"current_boot"`
		PIDNamespace     uint64      `json:"pid_namespace"`
		SamePIDNamespace bool        `json:"same_pid_namespace"`
		GroupAccess      bool        `json:"group_access"`
		Tables           []tableJSON `json:"tables"`
	}
	creatorJSON struct {
		PID        uint32     `json:"pid"`
		StartTicks uint64     `json:"start_ticks"`
		Started    *time.Time `json:"started"`
		State      string     `json:"state"`
		Alive      bool       `json:"alive"`
	}
	tableJSON struct {
		Kind      string `json:"kind"`
		EntrySize uint32 `json:"entry_size"`
		Count     uint64 `json:"count"`
		Offset    uint64 `json:"offset"`
		Size      uint64 `json:"size"`
		Claimed   *int   `json:"claimed"`
	}
	reclaimJSON struct {
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
		// its lock is free).
		Claims []reclaimClaimJSON `json:"claims"`
	}
	reclaimClaimJSON struct {
		Table  string `json:"table"`
		Index  int    `json:"index"`
		Name   string `json:"name"`
		PID    uint32 `json:"pid"`
		Count  uint32 `json:"count"`
		Action string `json:"action"`
	}
	reclaimTokenJSON struct {
		Index  int    `json:"index"`
		Name   string `json:"name"`
		Token  string `json:"token"` // a 64-bit number, as a string: exact in jq and JavaScript
		Action string `json:"action"`
	}
	// reclaimLockJSON is a lock-manager hold reclaim ended (or would).
	reclaimLockJSON struct {
		Resource string `json:"resource"`
		Owner    string `json:"owner"`
		PID      int    `json:"pid"`
		Why      string `json:"why"` // expired or dead
		Action   string `json:"action"`
	}
	reclaimTxnJSON struct {
		Index      int    `json:"index"`
		Generation uint32 `json:"generation"`
		Mode       string `json:"mode"`
		ownerJSON
		Action string `json:"action"`
	}
	reclaimRWLockJSON struct {
		Index  int    `json:"index"`
		Name   string `json:"name"`
		Holder string `json:"holder"`
		Record *int   `json:"record"`
		ownerJSON
		TID    uint64 `json:"tid"`
		Count  uint32 `json:"count"`
		Unique bool   `json:"unique"`
		Action string `json:"action"`
	}
	rwlocksJSON struct {
		Path    string       `json:"path"`
		RWLocks []rwlockJSON `json:"rwlocks"`
	}
	rwlockJSON struct {
		Index         int          `json:"index"`
		Name          string       `json:"name"`
		Refs          uint32       `json:"refs"`
		Held          string       `json:"held"`
		State         uint32       `json:"state"`
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
		Generation    uint64       `json:"generation"`
		Dead          int          `json:"dead"`
	}
	// ownerJSON is a process recorded as an owner: its pid and start time
	// (proc.Identity) and owner_state, one of the state* constants.
	ownerJSON struct {
		PID        uint32 `json:"pid"`
		StartTicks uint64 `json:"start_ticks"`
		OwnerState string `json:"owner_state"`
	}
	holderJSON struct {
		ownerJSON
		TID uint64 `json:"tid"`
	}
	readerJSON struct {
		Record int `json:"record"`
		ownerJSON
		Count uint32 `json:"count"`
	}
	reclaimSlotJSON struct {
		Index int    `json:"index"`
		Name  string `json:"name"`
		ownerJSON
		TID           uint64  `json:"tid"`
		Generation    uint64  `json:"generation"`
		NewGeneration *uint64 `json:"new_generation"`
		Action        string  `json:"action"`
	}
	benchJSON struct {
		Peer      string  `json:"peer"`
		Workload  string  `json:"workload"`
		Procs     int     `json:"procs"`
		Iters     uint64  `json:"iters"`
		Seconds   float64 `json:"seconds"`
		OpsPerSec float64 `json:"ops_per_sec"`
		NsPerOp   float64 `json:"ns_per_op"`
		OK        bool    `json:"ok"`
		Detail    string  `json:"detail"`
	}
	txnsJSON struct {
		Path          string        `json:"path"`
		Records       int           `json:"records"`
		ArenaSize     uint64        `json:"arena_bytes"`
		FreeSize      uint64        `json:"free_bytes"`
		BarrierLeader *ownerJSON    `json:"barrier_leader"`
		Txns          []txnJSON     `json:"txns"`
		Processes     []txnProcJSON `json:"processes"`
	}
	txnJSON struct {
		Index      int    `json:"index"`
		Generation uint32 `json:"generation"`
		State      string `json:"state"`
		Mode       string `json:"mode"`
		ownerJSON
		ArenaOffset   uint64        `json:"arena_offset"`
		ArenaSize     uint64        `json:"arena_size"`
		Used          uint64        `json:"used"`
		Objects       uint32        `json:"objects"`
		Promotions    uint32        `json:"promotions"`
		Promoted      uint32        `json:"promoted"`
		Destroyed     uint32        `json:"destroyed"`
		Pins          uint64        `json:"pins"`
		PinsByProcess []txnPinsJSON `json:"pins_by_process"`
	}
	txnPinsJSON struct {
		ownerJSON
		Pins uint32 `json:"pins"`
	}
	txnProcJSON struct {
		Row int `json:"row"`
		ownerJSON
		Pins       uint64 `json:"pins"`
		GlobalPins uint32 `json:"global_pins"`
	}
	slotsJSON struct {
		Path  string     `json:"path"`
		Slots []slotJSON `json:"slots"`
	}
	slotJSON struct {
		Index int    `json:"index"`
		Name  string `json:"name"`
		Refs  uint32 `json:"refs"`
		Mode  string `json:"mode"`
		ownerJSON
		TID       uint64 `json:"tid"`
		Token     uint64 `json:"token"`
		Recursion uint32 `json:"recursion"`
		Waiters   uint32 `json:"waiters"`
		// Inconsistent: a holder died holding the lock and no holder has
		// said since that it repaired the data (spinlock.Guard.MarkConsistent).
		Inconsistent bool `json:"inconsistent"`
	}
	locksJSON struct {
		Path         string     `json:"path"`
		DeclaredOnly bool       `json:"declared_only"`
		Capacity     int        `json:"capacity"`
		Resources    []lockJSON `json:"resources"`
	}
	lockJSON struct {
		Resource string           `json:"resource"`
		Mode     string           `json:"mode"`
		State    string           `json:"state"`
		Version  uint64           `json:"version"`
		Declared bool             `json:"declared"`
		Holders  []lockHolderJSON `json:"holders"`
	}
	lockHolderJSON struct {
		Owner        string     `json:"owner"`
		PID          int        `json:"pid"`
		Host         string     `json:"host,omitempty"`
		CompanionPID int        `json:"companion_pid"`
		Alive        bool       `json:"alive"`
		State        string     `json:"state"`
		Acquired     time.Time  `json:"acquired"`
		Expires      *time.Time `json:"expires"`
		AgeSeconds   float64    `json:"age_seconds"`
		LeftSeconds  *float64   `json:"left_seconds"`
	}
	statsJSON struct {
		Path               string  `json:"path"`
		TotalLocks         uint64  `json:"total_locks"`
		ActiveLocks        int     `json:"active_locks"`
		ExpiredLocks       uint64  `json:"expired_locks"`
		ConflictsDetected  uint64  `json:"conflicts_detected"`
		AverageHoldSeconds float64 `json:"average_hold_seconds"`
		Released           uint64  `json:"released"`
		Reclaimed          uint64  `json:"reclaimed"`
		Resources          int     `json:"resources"`
		Capacity           int     `json:"capacity"`
		DeclaredOnly       bool    `json:"declared_only"`
	}
)

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
