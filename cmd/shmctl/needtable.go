package main

import (
	"fmt"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/lockmgr"
	"github.com/shmlock/shmlock/shm"
	"github.com/shmlock/shmlock/txn"
)

// A segment's tables are sized when it is created, and 'create' can leave
// any of them out. Every command that lists or uses one table fails the
// same way on a segment without it: one line naming the table and the
// create flag that gives a new segment one, exit status exitError. (Only
// info, which shows every table, and reclaim, which frees what dead
// processes hold in whichever tables there are, take any segment.)
type tableNeed struct {
	name string // as the message names the table
	flag string // the create flag that sizes it
	// lib is the error of the package over the table for the same
	// failure, if it has one: it stays in the chain for errors.Is, and a
	// lockmgr code is printed as with every lockmgr failure.
	lib error
}

var tableNeeds = map[layout.Kind]tableNeed{
	layout.KindOwnerSlots: {"owner-slot table", "--slots", nil},
	layout.KindUpgrades:   {"upgrade-mutex table", "--upgrades", nil},
	layout.KindTxnRecords: {"transaction-record table", "--txn-records", txn.ErrNoSpace},
	layout.KindTxnArena:   {"transaction arena", "--txn-arena", txn.ErrNoSpace},
	layout.KindLockMgr:    {"lock-manager table", "--lockmgr-entries", lockmgr.ErrNoTable},
}

// noTableError says that segment path was created without a table.
type noTableError struct {
	path string
	need tableNeed
}

func (e *noTableError) Error() string {
	msg := fmt.Sprintf("%s has no %s: 'shmctl create %s N' makes a segment with one", e.path, e.need.name, e.need.flag)
	if code := lockmgr.Code(e.need.lib); code != "" {
		msg += " (" + code + ")"
	}
	return msg
}

func (e *noTableError) Unwrap() error { return e.need.lib }

// needTables fails with a *noTableError for the first of kinds that seg
// has no entries of.
func needTables(seg *shm.Segment, kinds ...layout.Kind) error {
	for _, k := range kinds {
		if seg.Len(k) == 0 {
			return &noTableError{path: seg.Path(), need: tableNeeds[k]}
		}
	}
	return nil
}

// openWithTables opens segment path with opts and checks that it has the
// tables kinds; the caller closes the segment.
func openWithTables(path string, opts shm.Options, kinds ...layout.Kind) (*shm.Segment, error) {
	seg, err := shm.Open(path, opts)
	if err != nil {
		return nil, err
	}
	if err := needTables(seg, kinds...); err != nil {
		_ = seg.Close()
		return nil, err
	}
	return seg, nil
}
