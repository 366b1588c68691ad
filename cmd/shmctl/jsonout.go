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
//	  claimed           number|null  claimed entries; null for a table
//	                               without a directory (all but owner_slots
//	                               and upgrades)
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
		RWLocks []reclaimRWLockJSON `json:"rwlocks"`
	}
	reclaimRWLockJSON struct {
		Index      int    `json:"index"`
		Name       string `json:"name"`
		Holder     string `json:"holder"`
		Record     *int   `json:"record"`
		PID        uint32 `json:"pid"`
		StartTicks uint64 `json:"start_ticks"`
		OwnerState string `json:"owner_state"`
		TID        uint64 `json:"tid"`
		Count      uint32 `json:"count"`
		Unique     bool   `json:"unique"`
		Action     string `json:"action"`
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
	holderJSON struct {
		PID        uint32 `json:"pid"`
		StartTicks uint64 `json:"start_ticks"`
		OwnerState string `json:"owner_state"`
		TID        uint64 `json:"tid"`
	}
	readerJSON struct {
		Record     int    `json:"record"`
		PID        uint32 `json:"pid"`
		StartTicks uint64 `json:"start_ticks"`
		OwnerState string `json:"owner_state"`
		Count      uint32 `json:"count"`
	}
	reclaimSlotJSON struct {
		Index         int     `json:"index"`
		Name          string  `json:"name"`
		PID           uint32  `json:"pid"`
		StartTicks    uint64  `json:"start_ticks"`
		OwnerState    string  `json:"owner_state"`
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
	slotsJSON struct {
		Path  string     `json:"path"`
		Slots []slotJSON `json:"slots"`
	}
	slotJSON struct {
		Index      int    `json:"index"`
		Name       string `json:"name"`
		Refs       uint32 `json:"refs"`
		Mode       string `json:"mode"`
		PID        uint32 `json:"pid"`
		StartTicks uint64 `json:"start_ticks"`
		OwnerState string `json:"owner_state"`
		TID        uint64 `json:"tid"`
		Token      uint64 `json:"token"`
		Recursion  uint32 `json:"recursion"`
		Waiters    uint32 `json:"waiters"`
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
