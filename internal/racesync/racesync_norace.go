//go:build !race

package racesync

// Enabled reports whether the race detector is on; see racesync_race.go.
const Enabled = false

// Acquire does nothing without the race detector; see racesync_race.go.
func Acquire[T any](*T) {}

// Release does nothing without the race detector; see racesync_race.go.
func Release[T any](*T) {}
