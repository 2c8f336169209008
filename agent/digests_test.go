package agent

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/preload"
)

// The preload waits for the read of an ISO's image digests to end: it gets what was read, an
// error when nothing was, and its context's error when it ends first.
func TestImageDigestsWait(t *testing.T) {
	t.Parallel()
	want := []preload.ImageDigest{{Ref: "registry.k8s.io/pause:3.10", Config: "sha256:0000"}}
	tests := []struct {
		name  string
		read  func(d *imageDigests, hex string)
		want  []preload.ImageDigest
		error string
	}{
		{
			name: "read",
			read: func(d *imageDigests, hex string) { d.set(hex, want); d.ended(hex) },
			want: want,
		},
		{
			name:  "the read ended without digests",
			read:  func(d *imageDigests, hex string) { d.ended(hex) },
			error: "could not read the image digests",
		},
		{
			name:  "the read has not ended",
			read:  func(*imageDigests, string) {},
			error: context.Canceled.Error(),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var d imageDigests
			const hex = "abc"
			tc.read(&d, hex)
			ctx, cancel := context.WithCancel(t.Context())
			if tc.error == context.Canceled.Error() {
				cancel()
			}
			defer cancel()
			got, err := d.wait(ctx, hex)
			if tc.error != "" {
				require.ErrorContains(t, err, tc.error)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			d.ended(hex) // a second end is harmless
		})
	}
}
