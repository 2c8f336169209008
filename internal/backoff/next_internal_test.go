package backoff

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The waits double from Initial up to Max, shortened by at most the jitter's part.
func TestNext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		p      Policy
		failed int
		lo, hi time.Duration
	}{
		{name: "first", p: Policy{Initial: time.Second, Max: time.Minute}, failed: 0, lo: time.Second, hi: time.Second},
		{name: "doubles", p: Policy{Initial: time.Second, Max: time.Minute}, failed: 3, lo: 8 * time.Second, hi: 8 * time.Second},
		{name: "capped", p: Policy{Initial: time.Second, Max: 10 * time.Second}, failed: 10, lo: 10 * time.Second, hi: 10 * time.Second},
		{name: "capped far out", p: Policy{Initial: time.Second, Max: 10 * time.Second}, failed: 500, lo: 10 * time.Second, hi: 10 * time.Second},
		{name: "jitter", p: Policy{Initial: time.Second, Max: time.Minute, Jitter: 0.5}, failed: 2, lo: 2 * time.Second, hi: 4 * time.Second},
		{name: "no max", p: Policy{Initial: time.Second}, failed: 4, lo: 16 * time.Second, hi: 16 * time.Second},
		{name: "no max, far out", p: Policy{Initial: time.Second}, failed: 500, lo: 1<<63 - 1, hi: 1<<63 - 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for range 50 {
				b := tt.p.Start()
				b.n = tt.failed
				d := b.Next()
				require.Equal(t, d, b.Next(), "Next is what the next Wait sleeps")
				require.GreaterOrEqual(t, d, tt.lo)
				require.LessOrEqual(t, d, tt.hi)
			}
		})
	}
}
