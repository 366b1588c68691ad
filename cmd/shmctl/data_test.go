package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

func TestDataFlags(t *testing.T) {
	t.Parallel()
	got, ios := parsedOptions(t, newCmdData, []string{"jobs", "--json", "--group"})
	assert.Equal(t, &dataOptions{IO: ios, Segment: "jobs", JSON: true, Group: true}, got)
}

// regionSegment is a segment with three regions of a 1000-byte area.
func regionSegment(t *testing.T) *shm.Segment {
	t.Helper()
	seg := newSegment(t, layout.Options{DataBytes: 1000, DataRegions: 4})
	for _, r := range []struct {
		name string
		size int
	}{{"queue", 100}, {"stats", 64}, {"größe", 1}} {
		_, err := seg.Data(r.name, r.size)
		require.NoError(t, err)
	}
	return seg
}

func TestDataCommand(t *testing.T) {
	t.Parallel()
	seg := regionSegment(t)
	const rows = "" +
		"0\tqueue\t0\t100\n" +
		"1\tstats\t128\t64\n" +
		"2\tgröße\t192\t1\n"
	for _, name := range []string{"data", "regions"} {
		r := shmctl(t, false, name, seg.Path())
		require.Equal(t, exitOK, r.code, "%s: stderr %s", name, r.stderr)
		assert.Equal(t, "INDEX\tNAME\tOFFSET\tBYTES\n"+rows, r.stdout, name)
		assert.Empty(t, r.stderr)
	}
	r := shmctl(t, false, "--no-header", "data", seg.Path())
	assert.Equal(t, rows, r.stdout, "--no-header")

	r = shmctl(t, true, "data", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr %s", r.stderr)
	assert.Equal(t, ""+
		"INDEX  NAME   OFFSET  BYTES\n"+
		"0      queue  0       100\n"+
		"1      stats  128     64\n"+
		"2      größe  192     1\n", r.stdout)

	empty := newSegment(t, layout.Options{})
	r = shmctl(t, false, "data", empty.Path())
	require.Equal(t, exitOK, r.code, "stderr %s", r.stderr)
	assert.Equal(t, "INDEX\tNAME\tOFFSET\tBYTES\n", r.stdout, "no regions yet")
}

func TestDataJSON(t *testing.T) {
	t.Parallel()
	seg := regionSegment(t)
	r := shmctl(t, false, "data", "--json", seg.Path())
	require.Equal(t, exitOK, r.code, "stderr %s", r.stderr)
	var doc dataJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	assert.Equal(t, dataJSON{docHeader: header("data"), Path: seg.Path(), AreaBytes: 1024, UsedBytes: 256, FreeBytes: 768, DirectoryEntries: 4,
		Regions: []regionJSON{{0, "queue", 0, 100}, {1, "stats", 128, 64}, {2, "größe", 192, 1}}}, doc)

	// The field names are an interface; this pins them.
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &raw))
	assert.ElementsMatch(t, []string{"schema", "command", "path", "area_bytes", "used_bytes", "free_bytes", "directory_entries", "regions"}, keys(raw))
	assert.ElementsMatch(t, []string{"index", "name", "offset", "bytes"}, keys(raw["regions"].([]any)[0].(map[string]any)))

	empty := newSegment(t, layout.Options{})
	r = shmctl(t, false, "data", "--json", empty.Path())
	require.Equal(t, exitOK, r.code, "stderr %s", r.stderr)
	assert.Contains(t, r.stdout, `"regions": []`, "an empty list, not null")
}

// A segment made without a data area fails as for any missing table,
// naming the create flag.
func TestDataWithoutArea(t *testing.T) {
	t.Parallel()
	seg := newSegment(t, layout.Options{DataBytes: -1})
	line := requireOneLineError(t, shmctl(t, false, "data", seg.Path()), exitError)
	assert.Contains(t, line, "has no data area")
	assert.Contains(t, line, "--data")

	noDir := newSegment(t, layout.Options{DataBytes: 4096, DataRegions: -1})
	line = requireOneLineError(t, shmctl(t, false, "regions", noDir.Path()), exitError)
	assert.Contains(t, line, "--data-regions")
}

func TestCreateData(t *testing.T) {
	t.Parallel()
	path := testproc.SegmentPath(t)
	r := shmctl(t, false, "create", path, "--data", "1MiB", "--data-regions", "5", "--json")
	require.Equal(t, exitOK, r.code, "stderr %s", r.stderr)
	var doc infoJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	tables := map[string]tableJSON{}
	for _, tb := range doc.Tables {
		tables[tb.Kind] = tb
	}
	assert.EqualValues(t, 5, tables["region_directory"].Entries)
	assert.EqualValues(t, 1<<20, tables["data"].Bytes)
	require.NotNil(t, tables["data"].Claimed)
	assert.Zero(t, *tables["data"].Claimed)

	seg, err := shm.Open(path, shm.Options{})
	require.NoError(t, err)
	defer seg.Close()
	_, err = seg.Data("big", 1<<20)
	require.NoError(t, err, "the whole area in one region")

	line := requireOneLineError(t, shmctl(t, false, "create", testproc.SegmentPath(t), "--data", fmt.Sprint(int64(layout.MaxDataBytes)+1)), exitUsage)
	assert.Contains(t, line, "data")
	line = requireOneLineError(t, shmctl(t, false, "create", testproc.SegmentPath(t), "--data", "lots"), exitUsage)
	assert.Contains(t, line, "--data")
}

// check validates the region directory: a clean one passes, each kind of
// damage is one finding that names the entry.
func TestCheckRegions(t *testing.T) {
	t.Parallel()
	r := shmctl(t, false, "check", regionSegment(t).Path())
	require.Equal(t, exitOK, r.code, "stdout %s\nstderr %s", r.stdout, r.stderr)

	le := binary.LittleEndian
	entry := func(i int) int { return i * layout.RegionEntrySize }
	for _, tc := range []struct {
		name, want string
		damage     func(dir []byte)
	}{
		{"overlap", "region_directory[2]: [0xc0, +1) overlaps entry 1", func(d []byte) { le.PutUint64(d[entry(1)+16:], 65) }},
		{"misaligned", `region_directory[1]: region "stats" at 0x88, not on a 64-byte boundary`, func(d []byte) { le.PutUint64(d[entry(1)+8:], 136) }},
		{"outside the area", `region_directory[2]: region "größe" [0x3c0, +100) outside the 1024-byte data area`, func(d []byte) {
			le.PutUint64(d[entry(2)+8:], 960)
			le.PutUint64(d[entry(2)+16:], 100)
		}},
		{"bad name", "region_directory[0]:", func(d []byte) { d[entry(0)+24] = '\t' }},
		{"name twice", `region_directory[1]: name "queue" is claimed by entry 0 too`, func(d []byte) { copy(d[entry(1)+24:], "queue") }},
		{"size 0", `region_directory[0]: region "queue" has size 0`, func(d []byte) { le.PutUint64(d[entry(0)+16:], 0) }},
		{"unknown state", "region_directory[3]: state 9", func(d []byte) { le.PutUint32(d[entry(3):], 9) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			seg := regionSegment(t)
			dir, err := seg.Region(layout.KindRegionDirectory)
			require.NoError(t, err)
			tc.damage(dir)
			r := shmctl(t, false, "check", seg.Path())
			require.Equal(t, exitError, r.code, "stderr %s", r.stderr)
			assert.Equal(t, 1, strings.Count(r.stdout, "\n"), "one finding: %q", r.stdout)
			assert.Contains(t, r.stdout, tc.want)
		})
	}
}
