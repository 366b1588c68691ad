package shm_test

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

// A reference record its process did not finish (Target and Count written,
// Owner not: it died) is free and harmless: AbandonedClaims notes it and
// CheckDirectories finds no damage; the next reference reuses the record.
func TestAbandonedReferenceRecord(t *testing.T) {
	t.Parallel()
	seg, _ := create(t, shm.Options{Options: layout.Options{Slots: 2, Upgrades: 1, ClaimRefs: 2}})
	refs, err := seg.Region(layout.KindClaimRefs)
	require.NoError(t, err)
	binary.LittleEndian.PutUint32(refs[8:], layout.ClaimTarget(layout.KindOwnerSlots, 1)) // Target of record 0
	binary.LittleEndian.PutUint32(refs[12:], 1)                                           // its Count

	found, err := seg.CheckDirectories()
	require.NoError(t, err)
	require.Empty(t, found)
	notes, err := seg.AbandonedClaims()
	require.NoError(t, err)
	require.Equal(t, []string{"claim_refs[0]: a reference record its process did not finish (it died); free, and the next reference reuses it"}, notes)

	_, err = seg.Claim(layout.KindOwnerSlots, "jobs")
	require.NoError(t, err)
	notes, err = seg.AbandonedClaims()
	require.NoError(t, err)
	require.Empty(t, notes, "the claim's reference took the record")
	found, err = seg.CheckDirectories()
	require.NoError(t, err)
	require.Empty(t, found)
}
