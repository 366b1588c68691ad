package layout

import (
	"errors"
	"fmt"
)

// Each malformed input is reported as a *FormatError wrapping one of these.
var (
	ErrTruncated    = errors.New("layout: truncated")
	ErrBadMagic     = errors.New("layout: not a shmlock segment (bad magic)")
	ErrVersion      = errors.New("layout: unsupported format version")
	ErrSizeMismatch = errors.New("layout: size does not match the header")
	ErrMalformed    = errors.New("layout: malformed header")
	ErrTableRange   = errors.New("layout: table out of range")
	ErrTableOverlap = errors.New("layout: tables overlap")
	ErrLimit        = errors.New("layout: over a limit")
	ErrChecksum     = errors.New("layout: header checksum mismatch")
	ErrBadName      = errors.New("layout: bad name")
	ErrUnknownTable = errors.New("layout: unknown table")
)

// FormatError says which field of a segment is wrong and why.
type FormatError struct {
	Field  string // the header field or table at fault, e.g. "total_size" or "upgrades"
	Detail string // what was found, for people
	Err    error  // one of the Err sentinels above
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("%v: %s: %s", e.Err, e.Field, e.Detail)
}

func (e *FormatError) Unwrap() error { return e.Err }

func formatErr(sentinel error, field, format string, args ...any) error {
	return &FormatError{Field: field, Detail: fmt.Sprintf(format, args...), Err: sentinel}
}
