package metrics

// SetTestHookRead sets a function that Use calls after it has the segment
// to read and before it reads it, where a read racing the segment's
// replacement is. Set it before f is used.
func (f *Follower) SetTestHookRead(hook func()) { f.testHookRead = hook }
