package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/planctl"
)

// When upgrade apply cannot read the release from the ISO's URL, its plan says why (the origin's
// answer, the missing validator, the damaged image), the URL redacted, not only that it could not.
func TestPlanKeepsWhyTheISOCouldNotBeRead(t *testing.T) {
	t.Parallel()
	target := planISO(t, planTargetYAML, "docker.io/rancher/harvester:v1.6.0\n", "docker.io/rancher/rke2-runtime:v1.33.3-rke2r1\n")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/forbidden.iso":
			http.Error(w, "SignatureDoesNotMatch", http.StatusForbidden)
		case "/plain.iso":
			r.Header.Del("Range")
			http.ServeFile(w, r, target)
		case "/damaged.iso":
			w.Header().Set("ETag", `"d"`)
			http.ServeContent(w, r, "", time.Time{}, strings.NewReader(strings.Repeat("x", 1<<20)))
		}
	}))
	t.Cleanup(srv.Close)
	tests := []struct {
		name string
		path string
		want string
	}{
		{name: "refused", path: "/forbidden.iso", want: "status 403 Forbidden"},
		{name: "no ranges", path: "/plain.iso", want: "its origin does not serve ranges: ISO " + srv.URL + "/plain.iso"},
		{name: "not an ISO", path: "/damaged.iso", want: "not an ISO 9660 image"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := planctl.PreviewOptions{To: "v1.6.0", Current: "v1.5.2", VersionCreated: true, ISOURL: srv.URL + tc.path + "?X-Amz-Signature=secret"}
			rep, err := planctl.Preview(t.Context(), o, nil, srv.Client())
			require.NoError(t, err)
			notes := strings.Join(rep.Notes, "\n")
			require.Contains(t, notes, "the release was not read from the ISO's URL (")
			require.Contains(t, notes, tc.want)
			require.NotContains(t, notes, "secret")
		})
	}
}
