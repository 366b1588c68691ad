package shm

// SetTestHookBeforePublish replaces the hook that runs between writing a
// claim and publishing it, and returns a function that restores it.
func SetTestHookBeforePublish(f func()) (restore func()) {
	old := testHookBeforePublish
	testHookBeforePublish = f
	return func() { testHookBeforePublish = old }
}

// SetTestHookBetweenSteps replaces the hook that runs between a claim's
// (or release's) two counts, and returns a function that restores it.
func SetTestHookBetweenSteps(f func()) (restore func()) {
	old := testHookBetweenSteps
	testHookBetweenSteps = f
	return func() { testHookBetweenSteps = old }
}

// SetTestHookFreeing replaces the hook that runs while an entry is freed,
// between marking it free and forgetting the records that name it.
func SetTestHookFreeing(f func()) (restore func()) {
	old := testHookFreeing
	testHookFreeing = f
	return func() { testHookFreeing = old }
}

// SetTestHookLastRef replaces the hook that runs in a Release between
// taking the reference off Refs and freeing the entry.
func SetTestHookLastRef(f func()) (restore func()) {
	old := testHookLastRef
	testHookLastRef = f
	return func() { testHookLastRef = old }
}
