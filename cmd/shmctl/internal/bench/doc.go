// Package bench is shmctl bench: the peer-benchmark driver contract of
// bench/README.md, for shmlock's own locks. The other drivers of the
// contract are C and C++ programs on bench/c/harness.h.
//
// It follows harness.h line for line where the numbers
// depend on it: the 64 KiB shared file and its offsets, the start barrier,
// the workload loops (uncontended, counter, pingpong, pingpong_retry, rw90,
// uncontended_shared),
// the per-worker stat slots, seconds = max(end) - t0 on CLOCK_MONOTONIC,
// the validation, and the one JSON result with its exit status. Only the
// lock differs: it lives in a shmlock segment in the sidecar file
// FILE+".shm", made by the driver and opened by every worker.
//
// The driver calls Drive with a function that starts a worker process (a
// re-execution of the program); each worker calls Work.
//
//	res, code := bench.Drive(cfg, func(me int) (*exec.Cmd, error) { ... })
package bench
