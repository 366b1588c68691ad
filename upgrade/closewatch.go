package upgrade

import "github.com/shmlock/shmlock/shm"

// closeWatch is for an acquisition that holds part of the lock while it
// waits for the rest: Lock holds the writers' mutex (and maybe
// stateWrite) while it waits for the upgrade holder or for readers,
// LockUpgrade the Upgrader word while it waits for a writer,
// UpgradeToUnique statePending while readers drain. Should the segment
// close then, what it holds would stay held in the file by this live
// process, and every other process's writers (or readers) would wait for
// it until it exits. So before it first gives up its CPU (a yield or a
// sleep) it registers with the segment (shm.Segment.OnClose): Close then
// wakes it and waits, before it replaces the mapping, until the
// acquisition has given back what it held and returned (done). Only the
// few loads of spinning before that are as exposed to a racing Close as a
// fast path.
type closeWatch struct {
	undone chan struct{} // closed by done; nil until registered
	stop   func() bool
}

// watch registers w, once; shm.ErrClosed if the segment's Close has begun
// (what the acquisition gives back may then not reach the file). w nil:
// the acquisition holds nothing while it waits.
func (m *Mutex) watch(w *closeWatch) error {
	if w == nil || w.undone != nil {
		return nil
	}
	undone := make(chan struct{})
	w.undone = undone
	stop, ok := m.seg.OnClose(func() {
		// Closed is true already: a sleeper that reads the gate after
		// this bump sees it before it sleeps (wait).
		wakeAnyway(&m.e.SharedGate)
		wakeAnyway(&m.e.UniqueGate)
		<-undone
	})
	w.stop = stop
	if !ok {
		return shm.ErrClosed
	}
	return nil
}

// done ends the watch, if it began: the acquisition has returned, and
// given back what it held if it failed.
func (w *closeWatch) done() {
	if w.undone != nil {
		w.finish()
	}
}

func (w *closeWatch) finish() {
	close(w.undone)
	w.stop()
}
