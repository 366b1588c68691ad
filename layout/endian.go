package layout

import "encoding/binary"

// The header is written with encoding/binary.LittleEndian while the shared
// words are accessed natively through sync/atomic, so the two views agree
// only on a little-endian machine. Every GOARCH shmlock supports on Linux
// (amd64, arm64, riscv64, loong64, ppc64le) is little-endian; this check
// makes a big-endian build fail loudly at start instead of corrupting
// segments.
func init() {
	var probe [2]byte
	binary.NativeEndian.PutUint16(probe[:], 1)
	if probe[0] != 1 {
		panic("layout: shmlock segments require a little-endian machine")
	}
}
