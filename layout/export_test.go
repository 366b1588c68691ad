package layout

// Unexported layout constants that the tests of package layout_test need to
// build and corrupt headers byte by byte.
const (
	DescKind       = descKind
	DescEntrySize  = descEntrySize
	DescCount      = descCount
	DescOffset     = descOffset
	DescReserved   = descReserved
	TableDescLimit = tableDescLimit
	OffReserved    = offReserved
	KnownFlags     = knownFlags
)
