package release

import (
	"encoding/json"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

const sampleRelease = `harvester: v1.5.2
harvesterChart: 1.5.2
installer: 5f0a1a2b
os: Harvester v1.5.2
kubernetes: v1.32.7+rke2r1
rancher: v2.11.3
monitoringChart: 105.1.2+up61.3.2
loggingChart: 105.2.0+up4.10.0
kubevirt: 1.4.1-150600.5.21.1
minUpgradableVersion: 'v1.4.2'
rancherDependencies:
  fleet:
    chart: 106.1.0+up0.12.3
    app: 0.12.3
  rancher-webhook:
    chart: 106.0.2+up0.7.2
    app: 0.7.2
newField: something
nested:
  a: 1
`

func TestParseRelease(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		check   func(t *testing.T, r *Release)
		wantErr string
	}{
		{
			name: "full release keeps unknown fields",
			in:   sampleRelease,
			check: func(t *testing.T, r *Release) {
				require.Equal(t, "v1.5.2", r.Harvester)
				require.Equal(t, "1.5.2", r.HarvesterChart)
				require.Equal(t, "v1.32.7+rke2r1", r.Kubernetes)
				require.Equal(t, "v1.4.2", r.MinUpgradableVersion)
				require.Equal(t, Dependency{Chart: "106.1.0+up0.12.3", App: "0.12.3"}, r.RancherDependencies["fleet"])
				require.Equal(t, []string{"nested", "newField"}, r.ExtraKeys())
				require.Equal(t, "something", r.Extra["newField"])
			},
		},
		{
			name: "numbers become strings",
			in:   "harvester: v1.0.0\nkubevirt: 1.4\nharvesterChart: 100\n",
			check: func(t *testing.T, r *Release) {
				require.Equal(t, "1.4", r.Kubevirt)
				require.Equal(t, "100", r.HarvesterChart)
				require.Empty(t, r.MinUpgradableVersion)
			},
		},
		{name: "missing harvester", in: "os: x\n", wantErr: "harvester version is missing"},
		{name: "not yaml", in: "harvester: [\n", wantErr: "parse harvester-release.yaml"},
		{name: "list where a string belongs", in: "harvester: v1\nrancher: [a]\n", wantErr: "field rancher"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := ParseRelease([]byte(tt.in))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			tt.check(t, r)
		})
	}
}

func TestReleaseJSONRoundTrip(t *testing.T) {
	t.Parallel()
	r, err := ParseRelease([]byte(sampleRelease))
	require.NoError(t, err)
	data, err := json.Marshal(r)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(data, &m))
	for _, k := range append(knownFields, "rancherDependencies", "newField", "nested") {
		require.Contains(t, m, k)
	}
	var back Release
	require.NoError(t, json.Unmarshal(data, &back))
	require.Equal(t, *r, back)
}

func TestLoadReleaseMissing(t *testing.T) {
	t.Parallel()
	_, err := LoadRelease(fstest.MapFS{})
	require.True(t, errors.Is(err, fs.ErrNotExist), "got %v", err)
	_, err = LoadBundle(fstest.MapFS{})
	require.True(t, errors.Is(err, fs.ErrNotExist), "got %v", err)
}

func TestLoadReleaseTooLarge(t *testing.T) {
	t.Parallel()
	big := "harvester: v1\n" + strings.Repeat("#", maxMetadataSize)
	_, err := LoadRelease(fstest.MapFS{ReleaseFile: {Data: []byte(big)}})
	require.ErrorContains(t, err, "more than")
}

func TestParseBundle(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    []Archive
		wantErr string
	}{
		{
			name: "groups sorted, paths under bundle",
			in: `images:
  rke2:
  - list: /harvester/images-lists/rke2.txt
    archive: /harvester/images/rke2.tar.zst
  common:
  - list: /harvester/images-lists/common.txt
    archive: /harvester/images/common.tar.zst
  agent:
  - list: /rancherd/images/agent.txt
    archive: /rancherd/images/agent.tar.zst
`,
			want: []Archive{
				{Group: "agent", List: "bundle/rancherd/images/agent.txt", Archive: "bundle/rancherd/images/agent.tar.zst"},
				{Group: "common", List: "bundle/harvester/images-lists/common.txt", Archive: "bundle/harvester/images/common.tar.zst"},
				{Group: "rke2", List: "bundle/harvester/images-lists/rke2.txt", Archive: "bundle/harvester/images/rke2.tar.zst"},
			},
		},
		{name: "empty", in: "images: {}\n"},
		{name: "escape", in: "images:\n  a:\n  - list: /../etc/passwd\n    archive: /x.tar.zst\n", wantErr: "leaves the bundle"},
		{name: "missing archive", in: "images:\n  a:\n  - list: /x.txt\n", wantErr: "images.a[0].archive: empty path"},
		{name: "backslash", in: "images:\n  a:\n  - list: /x\\y.txt\n    archive: /x\n", wantErr: "backslash"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := ParseBundle([]byte(tt.in))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, b.Archives)
		})
	}
}

func TestLoadImageList(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"bundle/l.txt": {Data: []byte("# images\nnginx\n\ndocker.io/rancher/harvester:v1.5.2\nrancher/harvester:v1.5.2\nregistry.suse.com/x/y@sha256:abc\n")},
	}
	refs, err := LoadImageList(fsys, Archive{List: "bundle/l.txt"})
	require.NoError(t, err)
	require.Equal(t, []string{
		"docker.io/library/nginx:latest",
		"docker.io/rancher/harvester:v1.5.2",
		"registry.suse.com/x/y@sha256:abc",
	}, refs)
}

func TestNormalizeRef(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "nginx", want: "docker.io/library/nginx:latest"},
		{in: "nginx:1.27", want: "docker.io/library/nginx:1.27"},
		{in: "index.docker.io/library/nginx:1", want: "docker.io/library/nginx:1"},
		{in: "rancher/rancher:v2.11.3", want: "docker.io/rancher/rancher:v2.11.3"},
		{in: "localhost/x", want: "localhost/x:latest"},
		{in: "localhost:5000/a/b:c", want: "localhost:5000/a/b:c"},
		{in: "quay.io/a/b@sha256:00", want: "quay.io/a/b@sha256:00"},
		{in: "quay.io/a/b:t@sha256:00", want: "quay.io/a/b:t@sha256:00"},
		{in: "", wantErr: "invalid"},
		{in: "a b", wantErr: "invalid"},
		{in: "x/", wantErr: "invalid"},
		{in: "x@nodigest", wantErr: "invalid digest"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := NormalizeRef(tt.in)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestParseBlobs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, data, err string
	}{
		{name: "sizes for every blob", data: `{"archives":[{"archive":"bundle/a.tar.zst","images":{"docker.io/x/y:1":["sha256:m","sha256:l"]}}],
			"sizes":{"sha256:m":{"size":5},"sha256:l":{"size":10,"unpacked":30}}}`},
		{name: "a blob without sizes", data: `{"archives":[{"archive":"a","images":{"x":["sha256:m"]}}],"sizes":{}}`, err: `blob "sha256:m" has no sizes`},
		{name: "a negative size", data: `{"archives":[{"archive":"a","images":{"x":["sha256:m"]}}],"sizes":{"sha256:m":{"size":-1}}}`, err: "negative size"},
		{name: "not JSON", data: `{`, err: "parse bundle/blobs.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := ParseBlobs([]byte(tt.data))
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, BlobSize{Size: 10, Unpacked: 30}, b.Sizes["sha256:l"])
			require.NotNil(t, b.Archive("bundle/a.tar.zst"))
			require.Nil(t, b.Archive("bundle/b.tar.zst"))
		})
	}
}
