package txn

import "errors"

// Sentinel errors, for errors.Is.
var (
	ErrClosing      = errors.New("txn: transaction is closing")
	ErrClosed       = errors.New("txn: transaction is closed")
	ErrStale        = errors.New("txn: reference to an earlier use of the record (stale)")
	ErrBadRef       = errors.New("txn: reference does not name an object")
	ErrNotObject    = errors.New("txn: reference names a cell, not an object")
	ErrArenaFull    = errors.New("txn: arena full")
	ErrNoRecord     = errors.New("txn: no free transaction record")
	ErrCloserPinned = errors.New("txn: the closer holds a pin on the transaction it closes")
	ErrPinsHeld     = errors.New("txn: pins still held")
	ErrWrongMode    = errors.New("txn: wrong close mode for this transaction")
	ErrOwnerAlive   = errors.New("txn: the owner is alive")
	ErrNoSpace      = errors.New("txn: segment has no room for transactions")
	ErrNoPinRow     = errors.New("txn: every pin row is taken by a live process")
	ErrSpaceClosed  = errors.New("txn: space is closed")
	ErrSyntax       = errors.New("txn: malformed reference")
	ErrCorrupt      = errors.New("txn: transaction record corrupted")
	ErrInvalid      = errors.New("txn: invalid argument")
)
