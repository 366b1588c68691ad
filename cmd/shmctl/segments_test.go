package main

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/internal/proc"
	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
)

// imageSegment copies the segment image file of testdata/segments (see its
// README) to a test path, as if made in this PID namespace: its recorded
// holders are of another boot, so every one of them reads as stale.
func imageSegment(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "segments", file))
	require.NoError(t, err)
	ns, err := proc.PIDNamespace()
	require.NoError(t, err)
	binary.LittleEndian.PutUint64(b[layout.OffPIDNS:], ns)
	binary.LittleEndian.PutUint32(b[layout.OffChecksum:], layout.Checksum(b))
	path := testproc.SegmentPath(t)
	require.NoError(t, os.WriteFile(path, b, 0o600))
	return path
}

// The commands read the images of testdata/segments as the packages
// wrote them: check finds no damage (it notes the dead claimant's entry),
// and each table command shows the holders the image's README lists.
func TestSegmentImages(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file     string
		command  string
		want     string
		findings []string
	}{
		{"owner-slots.seg", "slots", "" +
			"INDEX\tNAME\tREFS\tMODE\tPID\tLIVENESS\tTID\tTOKEN\tGENERATION\tRECURSION\tWAITERS\n" +
			"0\tqueue\t1\tpid/tid\t4242\tstale\t1229801703532086340\t-\t3\t0\t0\n" +
			"1\tjobs\t1\tpid/tid\t4343\tstale\t6148933456521300104\t-\t7\t1\t0\n" +
			"2\ttokened\t2\ttoken\t-\t-\t-\t81985529216486895\t-\t0\t0\n", nil},
		{"upgrades.seg", "rwlocks", "" +
			"INDEX\tNAME\tREFS\tHELD\tREADERS\tWRITER\tUPGRADER\tPENDING\tSHARED_WAITERS\tUNIQUE_WAITERS\tWRITER_WAITERS\tDEAD\n" +
			"0\ttable\t1\tunique\t-\t4242 (stale)\t-\tno\t0\t0\t0\t1\n" +
			"1\tindex\t2\tupgrade+shared\t4242 (stale):2,4343 (stale):1\t-\t4343 (stale)\tno\t0\t0\t0\t3\n", nil},
		// The holds' times are on CLOCK_MONOTONIC, whose origin is this
		// boot's: the columns of ages are cut off.
		{"lockmgr.seg", "locks", "" +
			"RESOURCE\tMODE\tSTATE\tGENERATION\tOWNER\tPID\tLIVENESS\n" +
			"build/cache\texclusive\tacquired\t1\tci-1\t4242\tstale\n" +
			"deploy\tcollaborative\tacquired\t2\talice\t4242\tstale\n" +
			"deploy\tcollaborative\tacquired\t2\tbob\t4343\tstale\n", nil},
		{"txn.seg", "txns", "" +
			"INDEX\tGENERATION\tSTATE\tMODE\tPID\tLIVENESS\tARENA_BYTES\tUSED_BYTES\tOBJECTS\tPROMOTIONS\tPINS_BY_PROCESS\n" +
			"0\t1\topen\tpins\t4242\tstale\t128\t32\t1\t0\t4242:1(stale)\n" +
			"1\t1\topen\tpins\t4343\tstale\t128\t0\t0\t0\t4343:1(stale)\n", nil},
		{"data-regions.seg", "data", "" +
			"INDEX\tNAME\tOFFSET\tBYTES\n" +
			"0\tqueue\t0\t100\n" +
			"1\tstats\t128\t64\n" +
			"2\tgröße\t192\t1\n",
			[]string{"note: region_directory[3]: a claim its claimant did not finish (it died); free, and the next claim reuses the entry"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			path := imageSegment(t, tc.file)
			r := shmctl(t, false, "check", path)
			assert.Equal(t, exitOK, r.code, "check: no damage in any image")
			got := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
			if r.stdout == "" {
				got = nil
			}
			assert.Equal(t, tc.findings, got, "check's output")
			r = shmctl(t, false, tc.command, path)
			require.Equal(t, exitOK, r.code, "stderr %s", r.stderr)
			out := r.stdout
			if tc.command == "locks" {
				var cut strings.Builder
				for line := range strings.Lines(out) {
					f := strings.Split(line, "\t")
					cut.WriteString(strings.Join(f[:min(len(f), 7)], "\t") + "\n")
				}
				out = cut.String()
			}
			assert.Equal(t, tc.want, out, "shmctl %s", tc.command)
		})
	}
}
