package httprange_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/internal/httprange"
)

// CheckURL accepts an http or https URL with a host and says what anything else is.
func TestCheckURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url  string
		want string // what the error says; "" for none
	}{
		{url: "http://origin/x.iso"},
		{url: "https://user:pw@origin:8443/x.iso?sig=1"},
		{url: "HTTPS://origin/x.iso"},
		{url: "ftp://origin/x.iso", want: "not an http or https URL: scheme ftp:// is not supported (want http://HOST/PATH or https://HOST/PATH)"},
		{url: "file:///x.iso", want: "scheme file:// is not supported"},
		{url: "/srv/release.iso", want: "not an http or https URL: a file path (want http://HOST/PATH or https://HOST/PATH)"},
		{url: "origin/x.iso", want: "a file path"},
		{url: "./a://b", want: "a file path"},
		{url: "http:///x.iso", want: "no host"},
		{url: "", want: "empty"},
		{url: "http://[::1/x.iso", want: "missing ']' in host"},
		{url: "https://user:secret@[::1/x.iso", want: "not an http or https URL"},
	}
	for _, tc := range tests {
		t.Run(tc.url, func(t *testing.T) {
			t.Parallel()
			err := httprange.CheckURL(tc.url)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, httprange.ErrNotURL)
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "secret", "the URL's secrets are not quoted")
		})
	}
}
