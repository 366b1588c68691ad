//go:build race

package testproc

// Race says whether the binary runs with the race detector, whose own
// allocations make testing.AllocsPerRun counts vary from run to run.
const Race = true
