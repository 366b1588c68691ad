//go:build !amd64

package mono

// haveTSC: no counter here; Now always reads the vDSO clock.
const haveTSC = false

func rdtsc() uint64 { return 0 }
