package txn

import (
	"fmt"
	"strconv"
	"strings"
)

// Ref names an object (or a cell) of a transaction: the record index, the
// generation the record had when the object was made, and the offset of
// the object's header in the transaction's arena. It is a plain value: it
// stays meaningful in any process that opened the segment, and it fails
// cleanly (ErrClosed, ErrStale) once the transaction ended. The zero Ref
// names nothing.
type Ref struct {
	Txn uint32 // transaction record index
	Gen uint32 // generation of the record, never 0 for a real Ref
	Off uint32 // offset of the object's header in the transaction's arena
}

// IsZero reports whether r is the zero Ref.
func (r Ref) IsZero() bool { return r == Ref{} }

// String formats r as "txn:gen:off", the form ParseRef reads.
func (r Ref) String() string { return fmt.Sprintf("%d:%d:%d", r.Txn, r.Gen, r.Off) }

// ParseRef reads a Ref written by Ref.String. Anything else is an
// ErrSyntax error.
func ParseRef(s string) (Ref, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return Ref{}, fmt.Errorf("%w: %q", ErrSyntax, s)
	}
	var v [3]uint32
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return Ref{}, fmt.Errorf("%w: %q", ErrSyntax, s)
		}
		v[i] = uint32(n)
	}
	return Ref{Txn: v[0], Gen: v[1], Off: v[2]}, nil
}
