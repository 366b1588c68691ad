package main

import (
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A signal sent to shmctl lock's process group (kill -TERM -PGID, GNU
// timeout(1), which signals its own group, a service manager's stop, a
// terminal's hang-up) reaches shmctl, the guard and the command alike:
// the command has its copy already, and the one shmctl passes on would be
// a second. Many programs take a second SIGINT or SIGTERM for "stop at
// once, without cleaning up". A signal sent to shmctl alone must reach the
// command, and nothing says which of the two a signal was (its siginfo is
// the same), but the guard can tell: it is in the group too and catches
// these signals, so its own copy of a signal shmctl passes on says that
// the signal went to the group.
//
// So the guard pairs each signal shmctl passes on with a copy of its own:
// one that came at most copyWindow before it, or comes at most copyWindow
// after it, means the command had it, and it is not passed on; with
// none, it is passed on once copyWindow is over. A signal sent to shmctl
// alone reaches the command that much later. copyWindow bounds the delay
// between the two copies of one signal (both were sent by one kill(2),
// but each process takes its own time to see its copy): under a load that
// delays one of them longer, the command gets the signal twice, as it did
// before the guard paired them. A command that left the group (setsid,
// setpgid) has no copy: what shmctl passes on goes to it at once.
const copyWindow = 250 * time.Millisecond

// signalAt is a signal and when the guard saw it.
type signalAt struct {
	sig syscall.Signal
	at  time.Time
}

// groupCopies pairs the signals shmctl passes on with the guard's own
// copies of signals sent to the group (see above). Only the guard's main
// loop uses it.
type groupCopies struct {
	copies  []signalAt // the guard's copies no pass-on has matched yet, by arrival
	pending []signalAt // pass-ons waiting for a copy, by arrival
	timer   *time.Timer
}

// copied records the guard's own copy of s, arrived at now: it cancels a
// pending pass-on of s, or waits for one.
func (g *groupCopies) copied(s syscall.Signal, now time.Time) {
	g.copies = unexpired(g.copies, now)
	if i := slices.IndexFunc(g.pending, func(p signalAt) bool { return p.sig == s }); i >= 0 {
		g.pending = slices.Delete(g.pending, i, i+1)
		g.arm(now)
		return
	}
	g.copies = append(g.copies, signalAt{s, now})
}

// passOn takes a signal shmctl passes on, at now, and reports whether it
// is to go to the command at once: not if the guard has a copy of it (the
// command has one too), nor while it waits for one.
func (g *groupCopies) passOn(s syscall.Signal, now time.Time, commandInGroup bool) bool {
	if !commandInGroup {
		return true
	}
	g.copies = unexpired(g.copies, now)
	if i := slices.IndexFunc(g.copies, func(c signalAt) bool { return c.sig == s }); i >= 0 {
		g.copies = slices.Delete(g.copies, i, i+1)
		return false
	}
	g.pending = append(g.pending, signalAt{s, now})
	g.arm(now)
	return false
}

// due removes and returns, in order, the pass-ons whose wait for a copy
// is over at now.
func (g *groupCopies) due(now time.Time) []syscall.Signal {
	var out []syscall.Signal
	for len(g.pending) > 0 && !now.Before(g.pending[0].at.Add(copyWindow)) {
		out = append(out, g.pending[0].sig)
		g.pending = g.pending[1:]
	}
	g.arm(now)
	return out
}

// wake is the channel that fires when the first pending pass-on is due;
// nil (never ready) while none waits.
func (g *groupCopies) wake() <-chan time.Time {
	if len(g.pending) == 0 || g.timer == nil {
		return nil
	}
	return g.timer.C
}

// arm sets the timer for the first pending pass-on.
func (g *groupCopies) arm(now time.Time) {
	if len(g.pending) == 0 {
		if g.timer != nil {
			g.timer.Stop()
		}
		return
	}
	d := g.pending[0].at.Add(copyWindow).Sub(now)
	if g.timer == nil {
		g.timer = time.NewTimer(d)
		return
	}
	g.timer.Reset(d)
}

// unexpired is cs without the copies older than copyWindow at now.
func unexpired(cs []signalAt, now time.Time) []signalAt {
	return slices.DeleteFunc(cs, func(c signalAt) bool { return now.Sub(c.at) > copyWindow })
}

// inProcessGroup reports whether process pid is in this process's group,
// and so gets the signals sent to it.
func inProcessGroup(pid int) bool {
	pgid, err := unix.Getpgid(pid)
	return err == nil && pgid == unix.Getpgrp()
}
