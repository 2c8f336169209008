package preload_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/upgrade-repo/upgrade-repo/preload"
	"github.com/upgrade-repo/upgrade-repo/preload/preloadtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// tarFor returns distinct fake archive contents; the fake store maps them to images.
func tarFor(name string) []byte { return []byte(strings.Repeat("tar of "+name+"\n", 100)) }

type fixture struct {
	dir      string
	store    *preloadtest.Store
	archives []preloadtest.Archive
}

func newFixture(t *testing.T, names ...string) fixture {
	t.Helper()
	f := fixture{dir: t.TempDir(), store: preloadtest.NewStore()}
	for _, n := range names {
		refs := []string{"docker.io/library/" + n + ":1", "docker.io/library/" + n + "-sidecar:1"}
		f.store.OnImport(tarFor(n), refs...)
		f.archives = append(f.archives, preloadtest.Archive{Group: "common", Name: n + ".tar.zst", Refs: refs, Data: preloadtest.Zstd(t, tarFor(n))})
	}
	preloadtest.WriteRelease(t, f.dir, f.archives...)
	return f
}

// flakySource fails the first open of every archive with a transient error and counts opens.
type flakySource struct {
	preload.Source
	mu    sync.Mutex
	opens map[string]int
}

func (s *flakySource) Open(ctx context.Context, path string, off int64) (io.ReadCloser, int64, error) {
	s.mu.Lock()
	s.opens[path]++
	n := s.opens[path]
	s.mu.Unlock()
	if n == 1 {
		return nil, 0, fmt.Errorf("dial: %w", preload.ErrTransient)
	}
	return s.Source.Open(ctx, path, off)
}

func TestRun(t *testing.T) {
	t.Parallel()
	t.Run("imports missing archives and reports progress", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "a", "b", "c")
		fsys := os.DirFS(f.dir)
		p, err := preload.New(f.store, []preload.Source{preload.NewFSSource("iso", fsys)}, preload.WithConcurrency(2))
		require.NoError(t, err)
		plan, st, err := p.Run(t.Context(), fsys)
		require.NoError(t, err)
		require.Len(t, plan.Imports(), 3)
		require.Equal(t, 3, f.store.Imports())
		require.Equal(t, preload.StatePreloaded, st.State)
		require.Equal(t, preload.ReasonAllPresent, st.Reason)
		require.Equal(t, 6, st.ImagesPresent)
		require.Equal(t, 6, st.ImagesTotal)
		var total int64
		for i, a := range st.Archives {
			require.Equal(t, preload.PhaseImported, a.Phase)
			require.Equal(t, "iso", a.Source)
			require.Equal(t, int64(len(f.archives[i].Data)), a.BytesRead)
			require.Equal(t, a.BytesTotal, a.BytesRead)
			total += a.BytesRead
		}
		require.Equal(t, total, st.BytesRead)
		require.Equal(t, st, p.Status())
	})
	t.Run("falls through to the next source and retries transient errors", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "a", "b")
		empty := preload.NewFSSource("peer", os.DirFS(t.TempDir()))
		flaky := &flakySource{Source: preload.NewFSSource("repo", os.DirFS(f.dir)), opens: map[string]int{}}
		p, err := preload.New(f.store, []preload.Source{empty, flaky}, preload.WithRetry(5*time.Second, time.Millisecond))
		require.NoError(t, err)
		_, st, err := p.Run(t.Context(), os.DirFS(f.dir))
		require.NoError(t, err)
		for _, a := range st.Archives {
			require.Equal(t, "repo", a.Source)
		}
		require.Equal(t, 2, flaky.opens[preloadtest.ArchivePath(f.archives[0])])
	})
	t.Run("no source holds the archive", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "a")
		p, err := preload.New(f.store, []preload.Source{preload.NewFSSource("iso", os.DirFS(t.TempDir()))})
		require.NoError(t, err)
		_, st, err := p.Run(t.Context(), os.DirFS(f.dir))
		require.ErrorIs(t, err, preload.ErrNotFound)
		require.ErrorIs(t, err, preload.ErrIncomplete)
		require.ErrorContains(t, err, "archive bundle/common/images/a.tar.zst: no source could open it")
		require.Equal(t, preload.StateFailed, st.State)
		require.Equal(t, []string{"docker.io/library/a:1", "docker.io/library/a-sidecar:1"}, st.Archives[0].Missing)
	})
	t.Run("an import that creates fewer images than listed fails with ImagesMissing", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "a")
		f.store.OnImport(tarFor("a"), "docker.io/library/a:1")
		p, err := preload.New(f.store, []preload.Source{preload.NewFSSource("iso", os.DirFS(f.dir))})
		require.NoError(t, err)
		_, st, err := p.Run(t.Context(), os.DirFS(f.dir))
		require.ErrorIs(t, err, preload.ErrIncomplete)
		require.Equal(t, preload.ReasonImagesMissing, st.Reason)
		require.Equal(t, 1, st.ImagesPresent)
		require.Equal(t, preload.PhaseFailed, st.Archives[0].Phase)
	})
	t.Run("a store error is not retried unless transient", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "a")
		f.store.ImportErr = errors.New("disk full")
		p, err := preload.New(f.store, []preload.Source{preload.NewFSSource("iso", os.DirFS(f.dir))}, preload.WithRetry(50*time.Millisecond, time.Millisecond))
		require.NoError(t, err)
		_, _, err = p.Run(t.Context(), os.DirFS(f.dir))
		require.ErrorContains(t, err, "disk full")
		require.Equal(t, 1, f.store.Imports())

		// Retried, but failing at the same point every time is no progress: given up once the
		// retry time has passed.
		f.store.ImportErr = fmt.Errorf("containerd: %w", preload.ErrTransient)
		_, st, err := p.Run(t.Context(), os.DirFS(f.dir))
		require.ErrorIs(t, err, preload.ErrTransient)
		require.ErrorContains(t, err, "gave up retrying")
		require.GreaterOrEqual(t, f.store.Imports(), 1+2)
		// Each attempt reads the archive from its start; progress counts the last one.
		require.Equal(t, int64(len(f.archives[0].Data)), st.Archives[0].BytesRead)
		require.Equal(t, int64(len(f.archives[0].Data)), st.BytesRead)
	})
	t.Run("bad metadata fails with MetadataUnreadable", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "bundle"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "bundle", "metadata.yaml"), []byte("images: [oops"), 0o644))
		p, err := preload.New(preloadtest.NewStore(), []preload.Source{preload.NewFSSource("iso", os.DirFS(dir))})
		require.NoError(t, err)
		_, st, err := p.Run(t.Context(), os.DirFS(dir))
		require.ErrorContains(t, err, "bundle/metadata.yaml")
		require.Equal(t, preload.ReasonMetadataFailed, st.Reason)
	})
	t.Run("copies archives into the runtime's directory", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, "a", "b")
		out := filepath.Join(t.TempDir(), "agent", "images")
		p, err := preload.New(f.store, []preload.Source{preload.NewFSSource("iso", os.DirFS(f.dir))}, preload.WithCopyDir(out))
		require.NoError(t, err)
		_, _, err = p.Run(t.Context(), os.DirFS(f.dir))
		require.NoError(t, err)
		for _, a := range f.archives {
			got, err := os.ReadFile(filepath.Join(out, a.Name))
			require.NoError(t, err)
			require.Equal(t, a.Data, got)
		}
		entries, err := os.ReadDir(out)
		require.NoError(t, err)
		require.Len(t, entries, 2)
	})
}

// watchingStore records the preloader's status while an import has read its whole stream.
type watchingStore struct {
	*preloadtest.Store
	p    *preload.Preloader
	seen []preload.Status
	mu   sync.Mutex
}

func (s *watchingStore) Import(ctx context.Context, r io.Reader) ([]string, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.seen = append(s.seen, s.p.Status())
	s.mu.Unlock()
	return s.Store.Import(ctx, bytes.NewReader(data))
}

func TestRunStatusWhileImporting(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "a", "b")
	f.store = preloadtest.NewStore(f.archives[0].Refs...) // a is present, b is not
	f.store.OnImport(tarFor("b"), f.archives[1].Refs...)
	w := &watchingStore{Store: f.store}
	p, err := preload.New(w, []preload.Source{preload.NewFSSource("iso", os.DirFS(f.dir))}, preload.WithConcurrency(1))
	require.NoError(t, err)
	w.p = p
	_, final, err := p.Run(t.Context(), os.DirFS(f.dir))
	require.NoError(t, err)
	require.Len(t, w.seen, 1)
	mid := w.seen[0]
	require.Equal(t, preload.StatePreloading, mid.State)
	require.Equal(t, 2, mid.ImagesPresent)
	require.Equal(t, 4, mid.ImagesTotal)
	require.Equal(t, []string{preload.PhaseSkipped, preload.PhaseImporting}, []string{mid.Archives[0].Phase, mid.Archives[1].Phase})
	size := int64(len(f.archives[1].Data))
	require.Equal(t, size, mid.Archives[1].BytesTotal)
	require.Equal(t, size, mid.BytesRead, "the whole compressed archive was read by then")
	require.Equal(t, 4, final.ImagesPresent)
	require.Equal(t, preload.StatePreloaded, final.State)
}

func TestHTTPSource(t *testing.T) {
	t.Parallel()
	data := []byte(strings.Repeat("0123456789", 1000))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/base/bundle/a.tar.zst":
			w.Header().Set("ETag", `"v1"`)
			http.ServeContent(w, r, "a", time.Time{}, bytes.NewReader(data))
		case "/base/bundle/norange.tar.zst":
			_, _ = w.Write(data)
		case "/base/bundle/busy.tar.zst":
			http.Error(w, "busy", http.StatusServiceUnavailable)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	src, err := preload.NewHTTPSource(srv.URL+"/base/", srv.Client())
	require.NoError(t, err)
	tests := []struct {
		name    string
		path    string
		offset  int64
		want    []byte
		size    int64
		wantErr error
		errText string
	}{
		{name: "whole file", path: "bundle/a.tar.zst", want: data, size: int64(len(data))},
		{name: "resumed at an offset", path: "bundle/a.tar.zst", offset: 9995, want: data[9995:], size: int64(len(data))},
		{name: "missing", path: "bundle/none.tar.zst", wantErr: preload.ErrNotFound},
		{name: "server busy is transient", path: "bundle/busy.tar.zst", wantErr: preload.ErrTransient},
		{name: "no range support", path: "bundle/norange.tar.zst", offset: 10, errText: "got the whole file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rc, size, err := src.Open(t.Context(), tc.path, tc.offset)
			if tc.wantErr != nil || tc.errText != "" {
				require.Error(t, err)
				if tc.wantErr != nil {
					require.ErrorIs(t, err, tc.wantErr)
				}
				require.ErrorContains(t, err, tc.errText)
				return
			}
			require.NoError(t, err)
			defer rc.Close()
			got, err := io.ReadAll(rc)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.size, size)
		})
	}
	t.Run("metadata as an fs.FS", func(t *testing.T) {
		t.Parallel()
		got, err := fs.ReadFile(src.FS(), "bundle/a.tar.zst")
		require.NoError(t, err)
		require.Equal(t, data, got)
		_, err = fs.ReadFile(src.FS(), "bundle/none.txt")
		require.ErrorIs(t, err, fs.ErrNotExist)
	})
}

// gateStore lets imports proceed only in pairs: each waits until a second one is in flight. It
// records the most imports seen at once.
type gateStore struct {
	*preloadtest.Store
	mu       sync.Mutex
	inFlight int
	most     int
	arrived  chan struct{}
}

func (s *gateStore) Import(ctx context.Context, r io.Reader) ([]string, error) {
	s.mu.Lock()
	s.inFlight++
	s.most = max(s.most, s.inFlight)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	// Two imports pair up on the unbuffered channel: one sends, the other receives.
	select {
	case s.arrived <- struct{}{}:
	case <-s.arrived:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(10 * time.Second):
		return nil, errors.New("no second import ran alongside this one")
	}
	return s.Store.Import(ctx, r)
}

func TestRunConcurrencyLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "a", "b", "c", "d")
	g := &gateStore{Store: f.store, arrived: make(chan struct{})}
	p, err := preload.New(g, []preload.Source{preload.NewFSSource("iso", os.DirFS(f.dir))}, preload.WithConcurrency(2))
	require.NoError(t, err)
	_, st, err := p.Run(t.Context(), os.DirFS(f.dir))
	require.NoError(t, err)
	require.Equal(t, preload.StatePreloaded, st.State)
	require.Equal(t, 2, g.most)
}

func TestRunResumesStalledHTTPStream(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "a")
	data := f.archives[0].Data
	var stalls sync.Map
	files := http.FileServer(http.Dir(f.dir))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The first full GET of the archive sends half of it, then goes quiet without closing.
		if strings.HasSuffix(r.URL.Path, ".tar.zst") && r.Header.Get("Range") == "" {
			if _, seen := stalls.LoadOrStore(r.URL.Path, true); !seen {
				w.Header().Set("Content-Length", fmt.Sprint(len(data)))
				_, _ = w.Write(data[:len(data)/2])
				w.(http.Flusher).Flush()
				<-r.Context().Done()
				return
			}
		}
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	src, err := preload.NewHTTPSource(srv.URL, srv.Client(), preload.WithIdleTimeout(200*time.Millisecond))
	require.NoError(t, err)
	p, err := preload.New(f.store, []preload.Source{src}, preload.WithRetry(5*time.Second, time.Millisecond))
	require.NoError(t, err)
	_, st, err := p.Run(t.Context(), src.FS())
	require.NoError(t, err)
	require.Equal(t, preload.StatePreloaded, st.State)
	require.Equal(t, int64(len(data)), st.BytesRead)
	_, stalled := stalls.Load("/" + preloadtest.ArchivePath(f.archives[0]))
	require.True(t, stalled, "the stalling path was never requested")
}
