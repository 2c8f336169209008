package preload_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/preload"
	"github.com/upgrade-repo/upgrade-repo/preload/preloadtest"
)

// A bundle that lists one archive thousands of times imports it once.
func TestRunDeduplicatesArchives(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "a", "b")
	entry := func(name string) string {
		return "  - list: /common/images-lists/" + name + ".txt\n    archive: /common/images/" + name + ".tar.zst\n"
	}
	var meta strings.Builder
	meta.WriteString("images:\n  common:\n" + entry("a"))
	for range 30000 {
		meta.WriteString(entry("b"))
	}
	// The same archive under another list adds that list's images to it.
	require.NoError(t, os.WriteFile(filepath.Join(f.dir, "bundle/common/images-lists/b-more.txt"), []byte("docker.io/library/b:1\ndocker.io/library/b-extra:1\n"), 0o644))
	meta.WriteString("  - list: /common/images-lists/b-more.txt\n    archive: /common/images/b.tar.zst\n")
	require.NoError(t, os.WriteFile(filepath.Join(f.dir, "bundle/metadata.yaml"), []byte(meta.String()), 0o644))
	f.store.OnImport(tarFor("b"), "docker.io/library/b:1", "docker.io/library/b-sidecar:1", "docker.io/library/b-extra:1")

	p, err := preload.New(f.store, []preload.Source{preload.NewFSSource("iso", os.DirFS(f.dir))})
	require.NoError(t, err)
	plan, st, err := p.Run(t.Context(), os.DirFS(f.dir))
	require.NoError(t, err)
	require.Len(t, plan.Steps, 2)
	require.Equal(t, []string{"docker.io/library/b:1", "docker.io/library/b-sidecar:1", "docker.io/library/b-extra:1"}, plan.Steps[1].Images)
	require.Equal(t, 2, f.store.Imports())
	require.Equal(t, 5, st.ImagesTotal)
	require.Equal(t, 5, st.ImagesPresent)
}

// unavailableStore fails its first calls of Missing transiently, as a restarting daemon does.
type unavailableStore struct {
	*preloadtest.Store
	failures atomic.Int64
}

func (s *unavailableStore) Missing(ctx context.Context, refs []string) ([]string, error) {
	if s.failures.Add(-1) >= 0 {
		return nil, fmt.Errorf("connection refused: %w", preload.ErrTransient)
	}
	return s.Store.Missing(ctx, refs)
}

// Asking which images are present is retried too while the store is unavailable, before and
// after the imports.
func TestRunRetriesAnUnavailableStore(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "a")
	s := &unavailableStore{Store: f.store}
	s.failures.Store(3)
	p, err := preload.New(s, []preload.Source{preload.NewFSSource("iso", os.DirFS(f.dir))}, preload.WithRetry(5*time.Second, time.Millisecond))
	require.NoError(t, err)
	_, st, err := p.Run(t.Context(), os.DirFS(f.dir))
	require.NoError(t, err)
	require.Equal(t, preload.StatePreloaded, st.State)

	// Unavailable for longer than the retry time: given up, saying so.
	s.failures.Store(1 << 40)
	p, err = preload.New(s, []preload.Source{preload.NewFSSource("iso", os.DirFS(f.dir))}, preload.WithRetry(20*time.Millisecond, time.Millisecond))
	require.NoError(t, err)
	_, st, err = p.Run(t.Context(), os.DirFS(f.dir))
	require.ErrorIs(t, err, preload.ErrTransient)
	require.ErrorContains(t, err, "gave up retrying")
	require.Equal(t, preload.StateFailed, st.State)
}

// The repo URL's password and query are not printed in errors.
func TestHTTPSourceRedactsTheURL(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	for _, base := range []string{
		strings.Replace(srv.URL, "http://", "http://user:s3cret@", 1) + "/?sig=deadbeef",
		"http://user:s3cret@127.0.0.1:1/?sig=deadbeef",
	} {
		src, err := preload.NewHTTPSource(base, nil)
		require.NoError(t, err)
		_, _, err = src.Open(t.Context(), "bundle/a.tar.zst", 0)
		require.ErrorIs(t, err, preload.ErrTransient)
		require.NotContains(t, err.Error(), "s3cret")
		require.NotContains(t, err.Error(), "deadbeef")
	}
	for _, base := range []string{"ftp://user:s3cret@repo/?sig=deadbeef", "http://user:s3cret@[::1/?sig=deadbeef"} {
		_, err := preload.NewHTTPSource(base, nil)
		require.Error(t, err)
		require.NotContains(t, err.Error(), "s3cret")
		require.NotContains(t, err.Error(), "deadbeef")
	}
}
