package redact_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/internal/redact"
)

func TestURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string
	}{
		{name: "plain", in: "https://releases.example.com/v1.5.2/x.iso", want: "https://releases.example.com/v1.5.2/x.iso"},
		{name: "password", in: "http://user:s3cret@origin:8080/x.iso", want: "http://origin:8080/x.iso"},
		{name: "user only", in: "http://token@origin/x.iso", want: "http://origin/x.iso"},
		{name: "presigned", in: "https://b.s3.amazonaws.com/x.iso?X-Amz-Credential=AKIA&X-Amz-Signature=abc#frag", want: "https://b.s3.amazonaws.com/x.iso"},
		{name: "empty query", in: "http://origin/x.iso?", want: "http://origin/x.iso"},
		{name: "unparsable", in: "http://user:s3cret@origin:port/x?sig=abc", want: redact.Unparsable},
		{name: "empty", in: "", want: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, redact.URL(tc.in))
		})
	}
}

func TestError(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://user:s3cret@127.0.0.1:1/x.iso?X-Amz-Signature=abc", nil)
	require.NoError(t, err)
	_, err = http.DefaultClient.Do(req)
	require.Error(t, err)
	require.Contains(t, err.Error(), "X-Amz-Signature", "net/http quotes the query")

	got := redact.Error(err)
	require.NotContains(t, got.Error(), "X-Amz-Signature")
	require.NotContains(t, got.Error(), "s3cret")
	require.Contains(t, got.Error(), "http://127.0.0.1:1/x.iso")
	require.ErrorIs(t, got, context.Canceled, "what the error wraps stays visible")
	var ue *url.Error
	require.ErrorAs(t, got, &ue)

	// What url.Parse refuses it quotes whole: an invalid port here.
	for _, bad := range []string{"http://user:s3cret@origin:port/?sig=abc"} {
		_, perr := url.Parse(bad)
		require.Error(t, perr)
		require.NotContains(t, redact.Error(perr).Error(), "s3cret")
	}

	other := errors.New("not a URL error")
	require.Equal(t, other, redact.Error(other))
	require.NoError(t, redact.Error(nil))
}
