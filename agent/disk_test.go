package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

func TestReadImageGC(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	kubeadm := write("kubeadm.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"+
		"imageGCHighThresholdPercent: 60\nimageGCLowThresholdPercent: 50\ncgroupDriver: systemd\n")
	unset := write("unset.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
	bad := write("bad.yaml", "imageGCHighThresholdPercent: 120\n")
	huge := write("huge.yaml", "# "+strings.Repeat("x", kubeletConfigLimit)+"\n")
	missing := filepath.Join(dir, "missing.yaml")
	tests := []struct {
		name string
		path string
		want *v1beta1.RepoNodeImageGC
		msg  string
	}{
		{name: "not configured", path: "", want: nil},
		{name: "set by the file", path: kubeadm, want: &v1beta1.RepoNodeImageGC{HighThresholdPercent: 60, LowThresholdPercent: 50, Source: kubeadm}},
		{name: "the kubelet's defaults", path: unset, want: &v1beta1.RepoNodeImageGC{HighThresholdPercent: 85, LowThresholdPercent: 80, Source: unset}},
		{name: "missing: defaults, and why", path: missing, msg: "read the kubelet's configuration: open " + missing},
		{name: "out of range", path: bad, msg: "an image GC threshold outside 0-100"},
		{name: "too large", path: huge, msg: "is over 1048576 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := readImageGC(tt.path)
			if tt.msg == "" {
				require.Equal(t, tt.want, got)
				return
			}
			require.Empty(t, got.Source)
			require.Equal(t, int32(85), got.HighThresholdPercent)
			require.Contains(t, got.Message, tt.msg)
		})
	}
}
