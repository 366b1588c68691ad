package lockmgr

import (
	"errors"

	"github.com/shmlock/shmlock/shm"
)

// Error is a lock-manager failure with a stable code (or one added
// here for a failure the design does not name), so logs and shmctl's JSON
// show a stable code. Every error this package returns for an expected
// failure wraps one of the sentinels below; test with errors.Is and read the
// code with Code.
type Error struct {
	Code string // stable, upper-case, e.g. "RESOURCE_LOCKED"
	msg  string
	also error // a sentinel of another package that the failure is too, or nil
}

func (e *Error) Error() string { return e.msg + " (" + e.Code + ")" }

// Unwrap lets errors.Is find the other package's sentinel that this one
// stands for (ErrClosed is shm.ErrClosed too).
func (e *Error) Unwrap() error { return e.also }

func newError(code, msg string) *Error { return &Error{Code: code, msg: "lockmgr: " + msg} }

// The sentinel errors. The first four carry the original codes (whose
// table spells the first one LOCK_ACQUISION_FAILED; the misspelling is not
// kept).
var (
	ErrAcquisitionFailed = newError("LOCK_ACQUISITION_FAILED", "lock acquisition failed: retries exhausted")
	ErrLockNotHeld       = newError("LOCK_NOT_HELD", "lock is not held by this owner")
	ErrLockTimeout       = newError("LOCK_TIMEOUT", "lock expired before release")
	ErrResourceLocked    = newError("RESOURCE_LOCKED", "resource is locked")

	ErrTimeout          = newError("WAIT_TIMEOUT", "timed out waiting for the lock")
	ErrResourceNotFound = newError("RESOURCE_NOT_FOUND", "resource is not declared")
	ErrAlreadyHeld      = newError("LOCK_ALREADY_HELD", "owner already holds the lock")
	ErrVersionConflict  = newError("VERSION_CONFLICT", "version is no longer current")
	ErrTableFull        = newError("TABLE_FULL", "lock table is full")
	ErrTooManyHolders   = newError("TOO_MANY_HOLDERS", "too many holders of one resource")
	ErrBadResource      = newError("INVALID_RESOURCE", "invalid resource name")
	ErrBadOwner         = newError("INVALID_OWNER", "invalid owner name")
	ErrBadMode          = newError("INVALID_MODE", "invalid lock mode")
	ErrBadOptions       = newError("INVALID_OPTIONS", "invalid options")
	ErrNoTable          = newError("NO_LOCK_TABLE", "segment has no lock-manager table")
	ErrReadOnly         = newError("READ_ONLY", "segment is open read-only")

	// ErrClosed is every failure of a Manager whose segment was closed
	// (shm.Segment.Close). It is shm.ErrClosed too, which callers tested
	// for before it had a code of its own, so errors.Is finds either.
	ErrClosed = &Error{Code: "CLOSED", msg: "lockmgr: segment is closed", also: shm.ErrClosed}

	// The errors of a networked backend (lockmgr/etcdlock): the store could
	// not be reached or failed the request, so the outcome is unknown; or
	// the Manager's session (the lease its holds without a TTL live on)
	// ended, and with it those holds: the Manager must be replaced.
	ErrUnavailable = newError("UNAVAILABLE", "lock store unavailable")
	ErrSessionLost = newError("SESSION_LOST", "session lease lost")
)

// Code returns the code of the lock-manager error in err's chain, or "" if
// there is none.
func Code(err error) string {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Code
	}
	return ""
}
