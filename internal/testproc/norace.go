//go:build !race

package testproc

// Race says whether the binary runs with the race detector; see race.go.
const Race = false
