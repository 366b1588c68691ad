package peerwork

// Line is the one JSON line a driver of the peer-benchmark contract
// (bench/README.md) prints: its keys and their order are the contract's.
// shmctl bench writes it and bench/matrix reads it, from every driver.
type Line struct {
	Peer      string  `json:"peer"`
	Workload  string  `json:"workload"`
	Procs     int     `json:"procs"`
	Iters     uint64  `json:"iters"` // per worker
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"ops_per_sec"`
	NsPerOp   float64 `json:"ns_per_op"`
	// CPUSeconds is the CPU time the workers' processes used in their
	// workload loops, all together; 0 if a worker could not read it, or the
	// driver does not say (it is not in every driver's line).
	CPUSeconds float64 `json:"cpu_seconds"`
	OK         bool    `json:"ok"`
	Detail     string  `json:"detail"`
}

// BusyCPUs is how many CPUs the run kept busy on average: the workers'
// CPU time over the run's time; 0 if the driver does not say.
func (l Line) BusyCPUs() float64 {
	if l.CPUSeconds <= 0 || l.Seconds <= 0 {
		return 0
	}
	return l.CPUSeconds / l.Seconds
}

// Exit statuses of the contract.
const (
	ExitOK          = 0 // ran and validated
	ExitFailed      = 1 // ran but failed; the line says why
	ExitBadArgs     = 2 // e.g. uncontended with procs != 1
	ExitUnsupported = 3 // the lock does not support the workload
)
