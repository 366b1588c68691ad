package mono

// haveTSC: this architecture has a time-stamp counter that rdtsc reads.
const haveTSC = true

// rdtsc reads the time-stamp counter. It is not ordered with the loads and
// stores around it (no LFENCE): a reading may be a few tens of cycles early,
// which no user of a nanosecond clock for lock statistics and expiry sees.
//
//go:noescape
func rdtsc() uint64
