package layout

// Where the txn tables (KindTxnRecords, KindTxnArena) record identities.
// Package txn owns the tables and defines the rest of their words; the
// identity words are named here too so that a reboot recovery (package
// shm's, and libshmlock's) marks them stale with every other table's: a
// transaction owner, pinner or lock holder of the previous boot must not
// be taken for a live process of this one.
const (
	TxnRecordOwner = 8 // offset in a txn record of its owner's packed identity

	// The txn arena starts with a control area: the barrier's leader
	// identity at TxnLeader, then two owner slots (pid/tid mode), the
	// allocator lock and the barrier leader lock; the pin table follows.
	TxnCtlAreaSize    = 2 * CacheLine
	TxnLeader         = 0
	TxnAllocLock      = CacheLine
	TxnBarrierLock    = CacheLine + OwnerSlotSize
	TxnMaxPinRows     = 64
	txnPinRowCounters = 4 // bytes of each pin count of a row
)

// TxnPinRows returns the pin table of a txn arena of arenaBytes bytes for
// records transaction records: rows rows of rowSize bytes from
// TxnCtlAreaSize, each starting with the packed identity of the process
// using it (then a u32 pin count per record and one for global pins,
// rounded up to a cache line). At most TxnMaxPinRows rows, taking at most
// half the arena, and only rows that fit after the control area (half an
// arena under twice its size holds a row that would end past it: a
// recovery marking that row stale changed the next table's first word);
// 0 rows if there is no record or no room for a row. Package txn uses no
// arena whose rows the last bound cuts: it leaves no data area.
func TxnPinRows(records int, arenaBytes uint64) (rows int, rowSize uint64) {
	if records <= 0 || arenaBytes < TxnCtlAreaSize {
		return 0, 0
	}
	rowSize = alignUp(8+txnPinRowCounters*uint64(records+1), CacheLine)
	return int(min(TxnMaxPinRows, (arenaBytes/2)/rowSize, (arenaBytes-TxnCtlAreaSize)/rowSize)), rowSize
}
