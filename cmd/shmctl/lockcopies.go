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
// So the guard holds each signal shmctl passes on against the copies of
// its own: a copy of the same signal that came at most copyWindow before
// it, or comes at most copyWindow after it, means the command had it, and
// it is not passed on; with none, it is passed on once copyWindow is over.
// A signal sent to shmctl alone reaches the command that much later.
// Copies are not counted off one by one: signals of one number do not
// queue, so two sent close together may reach shmctl as two and the guard
// as one (or the other way round), and a count would pass one on; a copy
// stands for its signal number over the whole window instead. The price:
// a signal sent to shmctl alone within copyWindow of the same signal sent
// to the group is taken for the group's (the command's pending copy may
// well have merged them too). copyWindow bounds the delay between two
// copies of one signal (sent by one kill(2), each process takes its own
// time to see its copy): under a load that delays one of them longer, the
// command gets the signal twice, as it did before the guard held them
// against each other. A command that left the group (setsid, setpgid) has
// no copy: what shmctl passes on goes to it at once.
const copyWindow = 250 * time.Millisecond

// signalAt is a signal and when the guard saw it.
type signalAt struct {
	sig syscall.Signal
	at  time.Time
}

// groupCopies holds the signals shmctl passes on against the guard's own
// copies of signals sent to the group (see above). Only the guard's main
// loop uses it.
type groupCopies struct {
	copies  map[syscall.Signal]time.Time // when the guard last saw a copy of each signal
	pending []signalAt                   // pass-ons waiting for a copy, by arrival
	timer   *time.Timer
}

// copied records the guard's own copy of s, arrived at now: it cancels
// the pending pass-ons of s, and those to come within copyWindow.
func (g *groupCopies) copied(s syscall.Signal, now time.Time) {
	if g.copies == nil {
		g.copies = map[syscall.Signal]time.Time{}
	}
	g.copies[s] = now
	g.pending = slices.DeleteFunc(g.pending, func(p signalAt) bool { return p.sig == s })
	g.arm(now)
}

// passOn takes a signal shmctl passes on, at now, and reports whether it
// is to go to the command at once: not if the guard has seen a copy of it
// within copyWindow (the command had one too), nor while it waits for one.
func (g *groupCopies) passOn(s syscall.Signal, now time.Time, commandInGroup bool) bool {
	if !commandInGroup {
		return true
	}
	if at, ok := g.copies[s]; ok && now.Sub(at) <= copyWindow {
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

// inProcessGroup reports whether process pid is in this process's group,
// and so gets the signals sent to it.
func inProcessGroup(pid int) bool {
	pgid, err := unix.Getpgid(pid)
	return err == nil && pgid == unix.Getpgrp()
}
