package backoff_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/internal/backoff"
)

func TestBounds(t *testing.T) {
	t.Parallel()
	b := backoff.Policy{Initial: time.Millisecond, Attempts: 3}.Start()
	require.NoError(t, b.Wait(t.Context()))
	require.NoError(t, b.Wait(t.Context()))
	require.ErrorIs(t, b.Wait(t.Context()), backoff.ErrGaveUp)

	b = backoff.Policy{Initial: 5 * time.Millisecond, Max: 5 * time.Millisecond, Total: 20 * time.Millisecond}.Start()
	start := time.Now()
	var err error
	for err == nil {
		err = b.Wait(t.Context())
	}
	require.ErrorIs(t, err, backoff.ErrGaveUp)
	require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond, "the time bound is waited for")

	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(errors.New("stopping"))
	require.EqualError(t, backoff.Policy{Initial: time.Hour}.Start().Wait(ctx), "stopping")
}

func TestRetry(t *testing.T) {
	t.Parallel()
	p := backoff.Policy{Initial: time.Millisecond, Attempts: 4}
	calls := 0
	require.NoError(t, backoff.Retry(t.Context(), p, func(context.Context) error {
		calls++
		if calls < 3 {
			return errors.New("not yet")
		}
		return nil
	}))
	require.Equal(t, 3, calls)

	calls = 0
	err := backoff.Retry(t.Context(), p, func(context.Context) error { calls++; return errors.New("down") })
	require.ErrorIs(t, err, backoff.ErrGaveUp)
	require.ErrorContains(t, err, "down")
	require.Equal(t, 4, calls)

	calls = 0
	refused := errors.New("403")
	err = backoff.Retry(t.Context(), p, func(context.Context) error { calls++; return backoff.Permanent(refused) })
	require.Equal(t, refused, err)
	require.Equal(t, 1, calls)
}
