package layout_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/shmlock/shmlock/layout"
)

func TestPlan(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts layout.Options
	}{
		{"zero", layout.Options{}},
		{"small", smallOpts},
		{"defaults", layout.Options{}.WithDefaults()},
		{"slots only", layout.Options{Slots: 1}},
		{"odd counts", layout.Options{Slots: 3, Upgrades: 5, TxnRecords: 7, TxnArenaBytes: 1, LockMgrEntries: 9}},
		{"arena rounded up", layout.Options{TxnArenaBytes: layout.ArenaUnit + 1}},
		{"one page exactly", layout.Options{Slots: (layout.PageSize - layout.HeaderSize) / (layout.OwnerSlotSize + layout.DirEntrySize)}},
		{"at every limit", layout.Options{
			Slots: layout.MaxSlots, Upgrades: layout.MaxUpgrades, TxnRecords: layout.MaxTxnRecords,
			TxnArenaBytes: layout.MaxTxnArenaBytes, LockMgrEntries: layout.MaxLockMgrEntries,
			UpgradeReaders: 16, // MaxUpgrades * 16 = MaxReaderRecords
			DataBytes:      layout.MaxDataBytes, DataRegions: layout.MaxDataRegions,
		}},
		{"data only", layout.Options{DataBytes: 1, DataRegions: 1}},
		{"data rounded up", layout.Options{DataBytes: layout.DataUnit + 1, DataRegions: 3}},
		{"region directory without data", layout.Options{DataRegions: 5}},
		{"readers per mutex at the limit", layout.Options{Upgrades: 1, UpgradeReaders: layout.MaxUpgradeReaders}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, err := layout.Plan(tc.opts)
			if err != nil {
				t.Fatalf("Plan(%+v): got error %v, want nil", tc.opts, err)
			}
			checkPlan(t, h, tc.opts)
			// A planned header, encoded, must pass Validate as it is.
			got, err := layout.Validate(encode(h), int64(h.TotalSize))
			if err != nil {
				t.Fatalf("Validate(Encode(Plan(%+v))): got error %v, want nil", tc.opts, err)
			}
			checkSameHeader(t, got, h)
		})
	}
}

// checkPlan checks that h lays out opts: every table present in Kind order,
// cache-line aligned, packed without overlap after the header, and the total
// a whole number of pages holding them all.
func checkPlan(tb testing.TB, h layout.Header, opts layout.Options) {
	tb.Helper()
	arenaUnits := (opts.TxnArenaBytes + layout.ArenaUnit - 1) / layout.ArenaUnit
	dataUnits := (opts.DataBytes + layout.DataUnit - 1) / layout.DataUnit
	counts := [layout.NumTables]uint64{
		uint64(opts.Slots), uint64(opts.Slots), uint64(opts.Upgrades), uint64(opts.Upgrades),
		uint64(opts.TxnRecords), uint64(arenaUnits), uint64(opts.LockMgrEntries),
		uint64(max(opts.Upgrades, 0) * opts.UpgradeReaders), uint64(opts.ClaimRefs),
		uint64(opts.DataRegions), uint64(dataUnits),
		uint64(opts.Slots + opts.Upgrades + opts.LockMgrEntries + opts.TxnRecords),
	}
	if h.Version != layout.Version {
		tb.Errorf("Version: got %d, want %d", h.Version, layout.Version)
	}
	prevEnd := uint64(layout.HeaderSize)
	for i, tab := range h.Tables {
		k := layout.Kind(i + 1)
		if tab.Kind != k {
			tb.Errorf("Tables[%d].Kind: got %v, want %v", i, tab.Kind, k)
		}
		if tab.EntrySize != k.EntrySize() {
			tb.Errorf("%v EntrySize: got %d, want %d", k, tab.EntrySize, k.EntrySize())
		}
		if tab.Count != counts[i] {
			tb.Errorf("%v Count: got %d, want %d", k, tab.Count, counts[i])
		}
		if tab.Offset%layout.CacheLine != 0 {
			tb.Errorf("%v Offset: got %#x, want a multiple of %d", k, tab.Offset, layout.CacheLine)
		}
		if tab.Offset < prevEnd {
			tb.Errorf("%v Offset: got %#x, want >= %#x (end of the previous table)", k, tab.Offset, prevEnd)
		}
		if gap := tab.Offset - prevEnd; tab.Offset >= prevEnd && gap >= layout.CacheLine {
			tb.Errorf("%v Offset: got %#x, a gap of %d after %#x, want less than a cache line", k, tab.Offset, gap, prevEnd)
		}
		prevEnd = tab.End()
	}
	if h.TotalSize%layout.PageSize != 0 {
		tb.Errorf("TotalSize: got %d, want a multiple of %d", h.TotalSize, layout.PageSize)
	}
	if h.TotalSize < prevEnd {
		tb.Errorf("TotalSize: got %d, want >= %d (end of the last table)", h.TotalSize, prevEnd)
	}
	if h.TotalSize-prevEnd >= layout.PageSize {
		tb.Errorf("TotalSize: got %d, want less than a page past the last table at %d", h.TotalSize, prevEnd)
	}
	if h.TotalSize > layout.MaxTotalSize {
		tb.Errorf("TotalSize: got %d, want <= MaxTotalSize %d", h.TotalSize, uint64(layout.MaxTotalSize))
	}
}

func TestPlanLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		opts  layout.Options
		field string // the FormatError.Field naming the table at fault
	}{
		{"negative slots", layout.Options{Slots: -1}, "owner_slots"},
		{"negative upgrades", layout.Options{Upgrades: -1}, "upgrades"},
		{"negative txn records", layout.Options{TxnRecords: -1}, "txn_records"},
		{"negative arena", layout.Options{TxnArenaBytes: -1}, "txn_arena"},
		{"negative lockmgr", layout.Options{LockMgrEntries: -1}, "lockmgr"},
		{"min int slots", layout.Options{Slots: math.MinInt}, "owner_slots"},
		{"slots over", layout.Options{Slots: layout.MaxSlots + 1}, "owner_slots"},
		{"upgrades over", layout.Options{Upgrades: layout.MaxUpgrades + 1}, "upgrades"},
		{"txn records over", layout.Options{TxnRecords: layout.MaxTxnRecords + 1}, "txn_records"},
		{"arena over", layout.Options{TxnArenaBytes: layout.MaxTxnArenaBytes + 1}, "txn_arena"},
		{"arena max int64", layout.Options{TxnArenaBytes: math.MaxInt64}, "txn_arena"},
		{"lockmgr over", layout.Options{LockMgrEntries: layout.MaxLockMgrEntries + 1}, "lockmgr"},
		{"max int slots", layout.Options{Slots: math.MaxInt}, "owner_slots"},
		{"negative data", layout.Options{DataBytes: -1}, "data"},
		{"negative regions", layout.Options{DataRegions: -1}, "region_directory"},
		{"data over", layout.Options{DataBytes: layout.MaxDataBytes + 1}, "data"},
		{"data max int64", layout.Options{DataBytes: math.MaxInt64}, "data"},
		{"regions over", layout.Options{DataRegions: layout.MaxDataRegions + 1}, "region_directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, err := layout.Plan(tc.opts)
			if !errors.Is(err, layout.ErrLimit) {
				t.Fatalf("Plan(%+v): got error %v, want %v", tc.opts, err, layout.ErrLimit)
			}
			checkFormatError(t, err, layout.ErrLimit)
			var fe *layout.FormatError
			errors.As(err, &fe)
			if fe.Field != tc.field {
				t.Errorf("Field: got %q, want %q", fe.Field, tc.field)
			}
			if h.TotalSize != 0 {
				t.Errorf("Plan(%+v) on error: got TotalSize %d, want the zero Header", tc.opts, h.TotalSize)
			}
		})
	}
}

// TestPlanArenaOverflow checks that an arena size near math.MaxInt64 is
// reported as the large count it is, not as a wrapped negative one.
func TestPlanArenaOverflow(t *testing.T) {
	t.Parallel()
	_, err := layout.Plan(layout.Options{TxnArenaBytes: math.MaxInt64})
	var fe *layout.FormatError
	if !errors.As(err, &fe) {
		t.Fatalf("Plan: got error %v, want a *layout.FormatError", err)
	}
	if strings.Contains(fe.Detail, "count -") {
		t.Errorf("Detail: got %q, want a positive count", fe.Detail)
	}
}

// The tables sized in bytes say their limits in bytes, as the options and
// shmctl create's flags give them: a data area over the limit was
// reported as a count of 64-byte units.
func TestPlanLimitsInBytes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opts layout.Options
		want string
	}{
		{layout.Options{DataBytes: layout.MaxDataBytes + 1}, fmt.Sprintf("%d bytes outside [0, %d]", layout.MaxDataBytes+1, layout.MaxDataBytes)},
		{layout.Options{DataBytes: -5}, fmt.Sprintf("-5 bytes outside [0, %d]", layout.MaxDataBytes)},
		{layout.Options{TxnArenaBytes: math.MaxInt64}, fmt.Sprintf("%d bytes outside [0, %d]", int64(math.MaxInt64), layout.MaxTxnArenaBytes)},
	} {
		_, err := layout.Plan(tc.opts)
		var fe *layout.FormatError
		if !errors.As(err, &fe) || fe.Detail != tc.want {
			t.Errorf("Plan(%+v): got %v, want detail %q", tc.opts, err, tc.want)
		}
	}
}

func TestWithDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   layout.Options
		want layout.Options
	}{
		{"zero takes defaults", layout.Options{}, layout.Options{
			Slots: layout.DefaultSlots, Upgrades: layout.DefaultUpgrades, TxnRecords: layout.DefaultTxnRecords,
			TxnArenaBytes: layout.DefaultTxnArenaBytes, LockMgrEntries: layout.DefaultLockMgrEntries,
			UpgradeReaders: layout.DefaultUpgradeReaders, ClaimRefs: 2 * (layout.DefaultSlots + layout.DefaultUpgrades),
			DataBytes: layout.DefaultDataBytes, DataRegions: layout.DefaultDataRegions,
		}},
		{"negative means none", layout.Options{Slots: -1, Upgrades: -2, TxnRecords: -3, TxnArenaBytes: -4, LockMgrEntries: math.MinInt, UpgradeReaders: -5, ClaimRefs: -6,
			DataBytes: -7, DataRegions: -8},
			layout.Options{}},
		{"positive kept", smallOpts, smallOpts},
		{"mixed", layout.Options{Slots: 7, Upgrades: -1, TxnArenaBytes: 1},
			layout.Options{Slots: 7, Upgrades: 0, TxnRecords: layout.DefaultTxnRecords, TxnArenaBytes: 1, LockMgrEntries: layout.DefaultLockMgrEntries,
				UpgradeReaders: layout.DefaultUpgradeReaders, ClaimRefs: 16, DataBytes: layout.DefaultDataBytes, DataRegions: layout.DefaultDataRegions}},
		{"no data area, no directory", layout.Options{DataBytes: -1},
			withData(layout.Options{}.WithDefaults(), 0, 0)},
		{"no data area, a directory asked for", layout.Options{DataBytes: -1, DataRegions: 3},
			withData(layout.Options{}.WithDefaults(), 0, 3)},
		{"data area, directory defaulted", layout.Options{DataBytes: 100},
			withData(layout.Options{}.WithDefaults(), 100, layout.DefaultDataRegions)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.in.WithDefaults(); got != tc.want {
				t.Errorf("%+v.WithDefaults(): got %+v, want %+v", tc.in, got, tc.want)
			}
			// Whatever WithDefaults returns, Plan accepts.
			if _, err := layout.Plan(tc.in.WithDefaults()); err != nil {
				t.Errorf("Plan(%+v.WithDefaults()): got error %v, want nil", tc.in, err)
			}
		})
	}
}

// withData is opts with the data area and region directory sizes given.
func withData(opts layout.Options, bytes int64, regions int) layout.Options {
	opts.DataBytes, opts.DataRegions = bytes, regions
	return opts
}
