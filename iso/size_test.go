package iso_test

import (
	"bytes"
	"math"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/iso"
	"github.com/upgrade-repo/upgrade-repo/iso/isotest"
)

// An image whose size is absurd (what a hostile origin's Content-Range may claim) is refused as
// a bad size at once, whatever its first sectors hold, never carried into the sums of the walk.
func TestOpenAbsurdSize(t *testing.T) {
	t.Parallel()
	isotest.RequireXorriso(t)
	_, p := fixtureImage(t, false, "-R", "-J", "-no-pad")
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	tests := []struct {
		name string
		size int64
	}{
		{name: "largest int64", size: math.MaxInt64},
		{name: "largest int64 less a sector", size: math.MaxInt64 - 2048},
		{name: "an exabyte", size: 1 << 60},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := iso.Open(bytes.NewReader(data), tc.size)
			require.ErrorIs(t, err, iso.ErrCorrupt)
			require.ErrorContains(t, err, "bad size")
		})
	}
	fsys, err := iso.Open(bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err, "the image at its own size")
	_, err = fsys.ReadFile("harvester-release.yaml")
	require.NoError(t, err)
}
