package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/shm"
)

// The actions of a leftover in the documents: shm.LeftoverAction's words,
// and what --dry-run says of them.
const (
	actionWouldRestore = "would restore"
	actionWouldRemove  = "would remove"
)

// leftoversOf finishes what the killed removers of the segment at path
// began (shm.RecoverLeftoversOf): rm and reclaim both look for them, since
// a segment whose name a killed remover moved aside is missing from its
// name, and its file is neither freed nor reachable.
func leftoversOf(path string, dryRun bool) ([]reclaimLeftoverJSON, error) {
	found, err := shm.RecoverLeftoversOf(path, dryRun)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
		// A directory that cannot be listed may still hold the segment
		// (search permission only): its own open says what is wrong.
		return []reclaimLeftoverJSON{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := []reclaimLeftoverJSON{}
	for _, l := range found {
		row := reclaimLeftoverJSON{Path: l.Path, Process: removerOf(l), PIDNamespace: optID(l.PIDNamespace),
			Users: l.Users, Action: string(l.Action), pending: l.Pending}
		if row.Users == nil {
			row.Users = []int{}
		}
		if l.Name != "" {
			row.Name = &l.Name
		}
		if l.Err != nil {
			msg := l.Err.Error()
			row.Error = &msg
		}
		if dryRun {
			switch l.Action {
			case shm.LeftoverRestored:
				row.Action = actionWouldRestore
			case shm.LeftoverRemoved:
				row.Action = actionWouldRemove
			}
		}
		out = append(out, row)
	}
	return out, nil
}

// removerOf is the process of leftover l's remover, or of a pending
// file's creator, as the recovery judged it: alive if that is why l was
// kept; unknown if it is of another PID namespace that this process cannot
// judge (shm.ErrForeignNamespace: its pid names another process here, or
// none; one of a namespace below this one is judged by its pid there);
// dead otherwise. So one recovery judges it, on one scan of /proc.
func removerOf(l shm.Leftover) *processJSON {
	id, _ := proc.Unpack(l.Remover)
	p := &processJSON{PID: id.PID, StartTicks: id.StartTicks, Liveness: livenessDead}
	switch {
	case errors.Is(l.Err, shm.ErrForeignNamespace):
		p.Liveness = livenessUnknown
	case errors.Is(l.Err, shm.ErrRemoverAlive), errors.Is(l.Err, shm.ErrCreatorAlive):
		p.Liveness = livenessAlive
	}
	if t, err := id.StartTime(); err == nil {
		t = t.UTC()
		p.Started = &t
	}
	return p
}

// printLeftovers writes one line for each leftover to w.
func printLeftovers(w io.Writer, leftovers []reclaimLeftoverJSON) {
	for _, l := range leftovers {
		fmt.Fprintln(w, escapeControls(leftoverLine(l)))
	}
}

// leftoverLine says what was done with leftover l, and why.
func leftoverLine(l reclaimLeftoverJSON) string {
	removing := l.Action == string(shm.LeftoverRemoved) || l.Action == actionWouldRemove
	if l.pending {
		if removing {
			return fmt.Sprintf("%s %s (process %d was creating a segment there and was killed): nobody uses it", l.Action, l.Path, l.Process.PID)
		}
		return fmt.Sprintf("%s %s (made by process %d to create a segment): %s", l.Action, l.Path, l.Process.PID, deref(l.Error))
	}
	was := ""
	if l.Name != nil {
		was = ", was " + *l.Name
	}
	killed := fmt.Sprintf("process %d moved it aside to remove it and was killed", l.Process.PID)
	switch {
	case l.Action == string(shm.LeftoverRestored) || l.Action == actionWouldRestore:
		pids := make([]string, len(l.Users))
		for i, pid := range l.Users {
			pids[i] = fmt.Sprint(pid)
		}
		return fmt.Sprintf("%s %s as %s: %s, and it is in use (processes %s)", l.Action, l.Path, deref(l.Name), killed,
			strings.Join(pids, ", "))
	case removing:
		return fmt.Sprintf("%s %s (%s%s): nobody uses it", l.Action, l.Path, killed, was)
	}
	return fmt.Sprintf("%s %s (moved aside by process %d%s): %s", l.Action, l.Path, l.Process.PID, was, deref(l.Error))
}
