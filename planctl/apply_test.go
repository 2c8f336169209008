package planctl_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/planctl"
)

var sum = strings.Repeat("0f", 64)

func TestVersionName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, url, want string
	}{
		{name: "harvester's name", url: "https://releases.rancher.com/harvester/v1.5.2/harvester-v1.5.2-amd64.iso", want: "v1.5.2"},
		{name: "a pre-release", url: "https://example.com/harvester-v1.6.0-rc1-arm64.iso", want: "v1.6.0-rc1"},
		{name: "no v", url: "https://example.com/rel-1.6.0.iso?X-Amz-Signature=abc", want: "1.6.0"},
		{name: "capitals", url: "https://example.com/Release-V2.0.0.iso", want: "v2.0.0"},
		{name: "no version", url: "https://example.com/harvester-master-amd64.iso"},
		{name: "no file", url: "https://example.com/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := planctl.VersionName(tt.url)
			if tt.want == "" {
				require.ErrorIs(t, err, planctl.ErrInvalid)
				require.ErrorContains(t, err, "--version")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestRequestObjects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		req       planctl.Request
		wantErr   string
		wantPlan  string
		wantImage string
	}{
		{
			name: "defaults", req: planctl.Request{ISOURL: "https://example.com/harvester-v1.6.0-amd64.iso", Checksum: strings.ToUpper(sum)},
			wantPlan: "to-v1-6-0",
		},
		{
			name:     "given",
			req:      planctl.Request{ISOURL: "http://example.com/x.iso", Checksum: "sha512:" + sum, Version: "v1.6.0", Plan: "up", UpgradeImage: "img:1", Force: true},
			wantPlan: "up", wantImage: "img:1",
		},
		{name: "not http", req: planctl.Request{ISOURL: "ftp://example.com/v1.6.0.iso", Checksum: sum}, wantErr: "not an http or https URL"},
		{name: "credentials not printed", req: planctl.Request{ISOURL: "file://user:secret@example.com/v1.6.0.iso", Checksum: sum}, wantErr: "file://example.com/v1.6.0.iso"},
		{name: "not a sha512", req: planctl.Request{ISOURL: "https://example.com/v1.6.0.iso", Checksum: "sha256:abc"}, wantErr: "not supported"},
		{name: "a bad plan name", req: planctl.Request{ISOURL: "https://example.com/v1.6.0.iso", Checksum: sum, Plan: "Up_1"}, wantErr: "cannot name an UpgradePlan"},
		{name: "a bad version name", req: planctl.Request{ISOURL: "https://example.com/v1.6.0.iso", Checksum: sum, Version: "V 1"}, wantErr: "cannot name a Version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, p, err := tt.req.Objects()
			if tt.wantErr != "" {
				require.ErrorIs(t, err, planctl.ErrInvalid)
				require.ErrorContains(t, err, tt.wantErr)
				require.NotContains(t, err.Error(), "secret")
				return
			}
			require.NoError(t, err)
			require.Equal(t, "sha512:"+sum, v.Spec.ISOChecksum, "one form: sha512: and lower-case hex")
			require.Equal(t, tt.req.ISOURL, v.Spec.ISOURL)
			require.Equal(t, tt.wantPlan, p.Name)
			require.Equal(t, v.Name, p.Spec.Version)
			require.Equal(t, tt.req.Force, p.Spec.Force)
			if tt.wantImage == "" {
				require.Nil(t, p.Spec.Upgrade)
			} else {
				require.Equal(t, tt.wantImage, *p.Spec.Upgrade)
			}
		})
	}
}

func TestFetchChecksum(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		"/one/v1.6.0.iso.sha512":   strings.ToUpper(sum) + "\n",
		"/named/v1.6.0.iso.sha512": strings.Repeat("1", 128) + "  other.iso\n" + sum + " *v1.6.0.iso\n",
		"/bsd/v1.6.0.iso.sha512":   "SHA512 (v1.6.0.iso) = " + sum + "\n",
		"/many/v1.6.0.iso.sha512":  strings.Repeat("1", 128) + "  a.iso\n" + strings.Repeat("2", 128) + "  b.iso\n",
		"/bad/v1.6.0.iso.sha512":   "<html>not found</html>\n",
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("sig") != "s" {
			http.Error(w, "no signature", http.StatusForbidden)
			return
		}
		f, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(f))
	}))
	t.Cleanup(srv.Close)
	tests := []struct {
		name, path, wantErr string
	}{
		{name: "one line, no name", path: "/one/v1.6.0.iso"},
		{name: "the line naming the ISO", path: "/named/v1.6.0.iso"},
		{name: "BSD form", path: "/bsd/v1.6.0.iso"},
		{name: "no line for the ISO", path: "/many/v1.6.0.iso", wantErr: "no line for v1.6.0.iso among 2"},
		{name: "not a checksum", path: "/bad/v1.6.0.iso", wantErr: "want 128 hex digits"},
		{name: "missing", path: "/none/v1.6.0.iso", wantErr: "/none/v1.6.0.iso.sha512: 404 Not Found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The query (a presigned URL's signature) goes along, and is never printed.
			got, err := planctl.FetchChecksum(t.Context(), srv.Client(), srv.URL+tt.path+"?sig=s")
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.NotContains(t, err.Error(), "sig=")
				return
			}
			require.NoError(t, err)
			require.Equal(t, sum, got)
		})
	}
}
