package backoff_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/internal/backoff"
)

func TestRetryableStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		code int
		want bool
	}{
		{name: "ok", code: http.StatusOK},
		{name: "not found", code: http.StatusNotFound},
		{name: "forbidden", code: http.StatusForbidden},
		{name: "request timeout", code: http.StatusRequestTimeout, want: true},
		{name: "too many requests", code: http.StatusTooManyRequests, want: true},
		{name: "internal error", code: http.StatusInternalServerError, want: true},
		{name: "not implemented", code: http.StatusNotImplemented},
		{name: "bad gateway", code: http.StatusBadGateway, want: true},
		{name: "unavailable", code: http.StatusServiceUnavailable, want: true},
		{name: "gateway timeout", code: http.StatusGatewayTimeout, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, backoff.RetryableStatus(tt.code))
		})
	}
}
