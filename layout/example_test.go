package layout_test

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/shmlock/shmlock/layout"
)

// Plan places every table of a new segment after the header.
func ExamplePlan() {
	h, err := layout.Plan(layout.Options{Slots: 8, Upgrades: 2, LockMgrEntries: 4, UpgradeReaders: 4, ClaimRefs: 20, DataRegions: 2, DataBytes: 256})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, t := range h.Tables {
		fmt.Printf("%-17s offset %#x count %d\n", t.Kind, t.Offset, t.Count)
	}
	fmt.Println("total size", h.TotalSize)
	// Output:
	// owner_slots       offset 0x400 count 8
	// slot_directory    offset 0x500 count 8
	// upgrades          offset 0x700 count 2
	// upgrade_directory offset 0x780 count 2
	// txn_records       offset 0x800 count 0
	// txn_arena         offset 0x800 count 0
	// lockmgr           offset 0x800 count 4
	// upgrade_readers   offset 0xc00 count 8
	// claim_refs        offset 0xc80 count 20
	// region_directory  offset 0xdc0 count 2
	// data              offset 0xe40 count 4
	// lock_stats        offset 0xf40 count 14
	// total size 8192
}

// Validate tells a file that is not a segment from a damaged segment.
func ExampleValidate() {
	garbage := make([]byte, layout.HeaderSize)
	copy(garbage, "#!/bin/sh\necho hello\n")
	_, err := layout.Validate(garbage, layout.PageSize)
	fmt.Println(errors.Is(err, layout.ErrBadMagic))
	fmt.Println(err)

	var fe *layout.FormatError
	if errors.As(err, &fe) {
		fmt.Println("field:", fe.Field)
	}
	// Output:
	// true
	// layout: not a shmlock segment (bad magic): magic: "#!/bin/s"
	// field: magic
}

// A creator encodes the header, then publishes the ready word last; an
// opener validates the header and checks that it is ready.
func ExampleEncode() {
	h, err := layout.Plan(layout.Options{Slots: 4})
	if err != nil {
		fmt.Println(err)
		return
	}
	h.Flags = layout.FlagGroupAccess
	file := make([]byte, h.TotalSize) // stands for the mapped file
	layout.Encode(h, file)
	fmt.Println("ready:", layout.IsReady(file))

	// A real creator stores the ready word atomically in the mapping.
	binary.LittleEndian.PutUint32(file[layout.OffReady:], layout.ReadyMark)
	fmt.Println("ready:", layout.IsReady(file))

	got, err := layout.Validate(file[:layout.HeaderSize], int64(len(file)))
	fmt.Println(err, got.Table(layout.KindOwnerSlots).Count, got.Flags == layout.FlagGroupAccess)
	// Output:
	// ready: false
	// ready: true
	// <nil> 4 true
}
