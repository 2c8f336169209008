package pack_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/release/pack"
)

func TestResultWrite(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		res  pack.Result
		want string
	}{
		{
			name: "two archives",
			res: pack.Result{Version: "v1.6.0", Files: []string{"a", "b", "c"}, Archives: []pack.BuiltArchive{
				{Group: "common", Archive: "bundle/common/images/rancher.tar.zst", Size: 100, Images: []pack.BuiltImage{{Ref: "x"}, {Ref: "y"}}},
				{Group: "rke2", Archive: "bundle/rke2/images/rke2.tar.zst", Size: 7, Images: []pack.BuiltImage{{Ref: "z"}}},
			}},
			want: "common  bundle/common/images/rancher.tar.zst (100 bytes, 2 images)\n" +
				"rke2    bundle/rke2/images/rke2.tar.zst (7 bytes, 1 images)\n" +
				"wrote out.iso: release v1.6.0, 2 archives, 3 images, 3 files\n",
		},
		{name: "nothing", res: pack.Result{Version: "v1"}, want: "wrote out.iso: release v1, 0 archives, 0 images, 0 files\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var b bytes.Buffer
			tt.res.Write(&b, "out.iso")
			require.Equal(t, tt.want, b.String())
		})
	}
}
