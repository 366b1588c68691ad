package spinlock

// SetForceHooks replaces ForceUnlock's test hooks (force.go): busy when a
// force finds another's lock held, took when it has taken the lock word
// over, takenOver between the takeover and the free. For a helper
// process, or a test that runs alone (not parallel).
func SetForceHooks(busy, took, takenOver func()) (restore func()) {
	old := [3]func(){testHookForceBusy, testHookForceTook, testHookForceTakenOver}
	testHookForceBusy, testHookForceTook, testHookForceTakenOver = busy, took, takenOver
	return func() { testHookForceBusy, testHookForceTook, testHookForceTakenOver = old[0], old[1], old[2] }
}
