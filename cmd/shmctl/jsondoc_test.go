package main

import (
	"fmt"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/layout"
)

func ptr[T any](v T) *T { return &v }

// process is the process object of id with liveness as a document shows
// it, less its start time (see checkStarted).
func process(id proc.Identity, liveness string) *processJSON {
	return &processJSON{PID: id.PID, StartTicks: id.StartTicks, Liveness: liveness}
}

// checkStarted checks the start time of p (if not nil) against its start
// ticks, null for a stale process, and clears it so that p compares with
// process(...). The time is the boot time plus the ticks, and the boot
// time /proc/stat gives may move by a second when the clock is set.
func checkStarted(tb testing.TB, p *processJSON) {
	tb.Helper()
	if p == nil {
		return
	}
	if p.Liveness == livenessStale {
		assert.Nil(tb, p.Started, "a stale process's start time")
		return
	}
	want, err := proc.Identity{PID: p.PID, StartTicks: p.StartTicks}.StartTime()
	require.NoError(tb, err)
	if assert.NotNil(tb, p.Started, "the start time of pid %d", p.PID) {
		assert.WithinDuration(tb, want, *p.Started, time.Second)
	}
	p.Started = nil
}

// The documents, by the section of docs/JSON.md that describes each.
var jsonDocTypes = map[string]reflect.Type{
	"info":    reflect.TypeFor[infoJSON](),
	"data":    reflect.TypeFor[dataJSON](),
	"version": reflect.TypeFor[versionJSON](),
	"slots":   reflect.TypeFor[slotsJSON](),
	"rwlocks": reflect.TypeFor[rwlocksJSON](),
	"txns":    reflect.TypeFor[txnsJSON](),
	"locks":   reflect.TypeFor[locksJSON](),
	"stats":   reflect.TypeFor[statsJSON](),
	"check":   reflect.TypeFor[checkJSON](),
	"reclaim": reflect.TypeFor[reclaimJSON](),
	"unlock":  reflect.TypeFor[unlockJSON](),
	"bench":   reflect.TypeFor[benchJSON](),
}

// ownPkg is this package's path, as reflect gives it.
var ownPkg = reflect.TypeFor[processJSON]().PkgPath()

// documented reports whether t is a type of the documents: this
// package's, or the benchmark contract's line (internal/peerwork), which
// shmctl bench prints.
func documented(t reflect.Type) bool {
	return t.PkgPath() == ownPkg || t == reflect.TypeFor[benchJSON]()
}

// jsonKeys collects the JSON keys of struct type t and of the objects in
// it, but not those of processJSON, which docs/JSON.md describes once.
func jsonKeys(t reflect.Type, into map[string]bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || !documented(t) || t == reflect.TypeFor[processJSON]() {
		return
	}
	for f := range t.Fields() {
		if f.Anonymous {
			jsonKeys(f.Type, into)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		into[name] = true
		jsonKeys(f.Type, into)
	}
}

// docKeys are the keys a section of docs/JSON.md describes: the
// backquoted words of its tables' first column, and of its lists written
// as "`key` (type".
func docKeys(section string) map[string]bool {
	keys := map[string]bool{}
	quoted := regexp.MustCompile("`([a-z_]+)`")
	inProse := regexp.MustCompile("`([a-z_]+)` \\(")
	for line := range strings.Lines(section) {
		if cells := strings.Split(line, "|"); strings.HasPrefix(line, "|") && len(cells) > 2 {
			for _, m := range quoted.FindAllStringSubmatch(cells[1], -1) {
				keys[m[1]] = true
			}
			continue
		}
		for _, m := range inProse.FindAllStringSubmatch(line, -1) {
			keys[m[1]] = true
		}
	}
	return keys
}

// docSections splits docs/JSON.md by its headings of level 2 and 3.
func docSections(tb testing.TB) map[string]string {
	tb.Helper()
	b, err := os.ReadFile("../../docs/JSON.md")
	require.NoError(tb, err)
	sections := map[string]string{}
	name := ""
	for line := range strings.Lines(string(b)) {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			name = strings.TrimSpace(h)
		} else if h, ok := strings.CutPrefix(line, "### "); ok {
			name = strings.TrimSpace(h)
		}
		sections[name] += line
	}
	return sections
}

// docs/JSON.md describes every key of every document, and no key that
// none has; every --json flag's help and the README point to it.
func TestJSONDocs(t *testing.T) {
	t.Parallel()
	sections := docSections(t)
	for name, typ := range jsonDocTypes {
		section, ok := sections[name]
		if !assert.True(t, ok, "docs/JSON.md has no section %q", name) {
			continue
		}
		want := map[string]bool{}
		jsonKeys(typ, want)
		assert.Equal(t, slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(docKeys(section))),
			"the keys of %v against those docs/JSON.md's section %q describes", typ, name)
	}
	want := map[string]bool{}
	for f := range reflect.TypeFor[processJSON]().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		want[name] = true
	}
	assert.Equal(t, slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(docKeys(sections["The process object"]))))
	assert.Contains(t, sections[""], fmt.Sprintf("This is **schema %d**", schemaVersion))

	ios, _, _ := testIOStreams(false)
	root := newCmdRoot(ios)
	withJSON := 0
	for _, c := range root.Commands() {
		if f := c.Flags().Lookup("json"); f != nil {
			withJSON++
			assert.Contains(t, f.Usage, "docs/JSON.md", "shmctl %s --json's help", c.Name())
			assert.Contains(t, f.Usage, fmt.Sprintf("schema %d", schemaVersion), "shmctl %s --json's help", c.Name())
		}
	}
	assert.Equal(t, 12, withJSON, "commands with --json: info, create, version, slots, rwlocks, txns, locks, stats, check, reclaim, unlock, data")
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	assert.Contains(t, string(readme), "[docs/JSON.md](docs/JSON.md)")
}

// Every 64-bit integer field of the documents either holds a value that
// is bounded below 2^53 (why, below) or is a string: a new field must
// choose. (requireSafeNumbers checks the values of the golden documents.)
func TestJSONIntegersFit(t *testing.T) {
	t.Parallel()
	bounded := map[string]string{
		"tableJSON.Entries":           "below 2^24 (layout's Max* table sizes)",
		"tableJSON.Capacity":          "at most Entries",
		"tableJSON.Offset":            "within the segment: below layout.MaxTotalSize, 2^40",
		"tableJSON.Bytes":             "within the segment",
		"infoJSON.TotalBytes":         "at most layout.MaxTotalSize, 2^40",
		"processJSON.StartTicks":      "proc.StartBits (41) bits",
		"rwlockJSON.SharedHolds":      "the sum of at most 2^12 records' 32-bit counts: below 2^44",
		"txnsJSON.DataBytes":          "below layout.MaxTxnArenaBytes, 2^36",
		"txnsJSON.FreeBytes":          "at most DataBytes",
		"txnJSON.ArenaOffset":         "within the data area",
		"txnJSON.ArenaBytes":          "within the data area",
		"txnJSON.UsedBytes":           "within the arena",
		"txnJSON.Pins":                "the sum of the 32-bit counts of at most 64 pin rows (txn's maxPinRows): below 2^38",
		"txnProcJSON.Pins":            "the sum of the 32-bit counts of at most 2^20 records: below 2^52",
		"statsJSON.TotalLocks":        "a counter: 2^53 grants take years at any rate (docs/JSON.md, Numbers)",
		"statsJSON.ExpiredLocks":      "a counter, as TotalLocks",
		"statsJSON.ConflictsDetected": "a counter, as TotalLocks",
		"statsJSON.Released":          "a counter, as TotalLocks",
		"statsJSON.Reclaimed":         "a counter, as TotalLocks",
		"statsJSON.ActiveLocks":       "holds in a table of at most 2^20 entries",
		"statsJSON.Resources":         "at most Capacity",
		"statsJSON.Capacity":          "below layout.MaxLockMgrEntries, 2^20",
		"locksJSON.Capacity":          "below layout.MaxLockMgrEntries, 2^20",
		"txnsJSON.Records":            "below layout.MaxTxnRecords, 2^20",
		"rwlockJSON.ReaderRecords":    "below layout.MaxUpgradeReaders, 2^12",
		"Line.Procs":                  "bench.MaxProcs",
		"Line.Iters":                  "iterations per worker, run one by one: 2^53 of them take years",
		"schema":                      "schemaVersion, a small number",
		"claimed":                     "claimed entries of a table: below 2^24",
		"index":                       "an index into a table: below 2^24",
		"reclaimRWLockJSON.Record":    "an index among a mutex's reader records",
		"readerJSON.Record":           "an index among a mutex's reader records",
		"rwlockJSON.Dead":             "at most 2 + the mutex's reader records",
		"txnProcJSON.Row":             "a pin row",
		"dataJSON.AreaBytes":          "below layout.MaxDataBytes, 2^36",
		"dataJSON.UsedBytes":          "at most AreaBytes",
		"dataJSON.FreeBytes":          "at most AreaBytes",
		"dataJSON.DirectoryEntries":   "below layout.MaxDataRegions, 2^16",
		"regionJSON.Offset":           "within the data area",
		"regionJSON.Bytes":            "within the data area",
	}
	used := map[string]bool{}
	for name, typ := range jsonDocTypes {
		walkFields(typ, func(owner string, f reflect.StructField) {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			switch ft.Kind() {
			case reflect.Int, reflect.Int64, reflect.Uint, reflect.Uint64:
			default:
				return
			}
			tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case bounded[owner+"."+f.Name] != "":
				used[owner+"."+f.Name] = true
			case bounded[tag] != "":
				used[tag] = true
			default:
				t.Errorf("%s: %s.%s (%q) is a 64-bit integer: make it a string (idString), or say in this test why its values stay below 2^53",
					name, owner, f.Name, tag)
			}
		})
	}
	for k := range bounded {
		assert.True(t, used[k], "%s: no such 64-bit integer field any more", k)
	}
}

// walkFields calls f with every field of the struct types in t.
func walkFields(t reflect.Type, f func(owner string, field reflect.StructField)) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || !documented(t) {
		return
	}
	for field := range t.Fields() {
		f(t.Name(), field)
		walkFields(field.Type, f)
	}
}

// The info section's `kind` row names every table kind an info document
// can show, so a table added to the format is added there too.
func TestJSONDocsNameEveryTableKind(t *testing.T) {
	t.Parallel()
	var row string
	for line := range strings.Lines(docSections(t)["info"]) {
		if strings.HasPrefix(line, "| `kind` |") {
			row = line
		}
	}
	require.NotEmpty(t, row, "docs/JSON.md: info's tables[] row for kind")
	for k := layout.Kind(1); int(k) <= layout.NumTables; k++ {
		assert.Contains(t, row, `"`+k.String()+`"`, "docs/JSON.md: info's tables[].kind does not name %s", k)
	}
}
