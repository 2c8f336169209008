package acquire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/upgrade-repo/upgrade-repo/chunks"
)

// Option configures a Cache.
type Option func(*Cache)

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(c *Cache) { c.log = l } }

// WithMetrics sets the metrics the Cache records into (default: none).
func WithMetrics(m *Metrics) Option { return func(c *Cache) { c.metrics = m } }

// WithRetry sets the retry policy of a failing fetch: how many attempts in a row may fail
// without bringing a byte before Get gives up (default 10), the first wait (default 1s), doubled
// after each failure up to max (default 30s). An attempt that brings bytes starts the count and
// the wait over: an origin that cuts every connection is followed to the end, while one that
// gives nothing is given up after a bounded time (about 2.5 minutes with the defaults).
func WithRetry(attempts int, initial, max time.Duration) Option {
	return func(c *Cache) { c.attempts, c.initial, c.max = attempts, initial, max }
}

// WithProgressInterval sets how often download progress is logged (default 5s).
func WithProgressInterval(d time.Duration) Option { return func(c *Cache) { c.every = d } }

// Metrics are the acquisition metrics, prefixed upgrade_repo_acquire_.
type Metrics struct {
	fetched  prometheus.Counter
	present  prometheus.Gauge
	expected prometheus.Gauge
	retries  prometheus.Counter
	verified *prometheus.CounterVec
}

// NewMetrics creates the acquisition metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		fetched: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "upgrade_repo_acquire_fetched_bytes_total", Help: "Bytes of ISO content fetched into the cache."}),
		present: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "upgrade_repo_acquire_present_bytes", Help: "Bytes of the ISO being acquired that are in the cache."}),
		expected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "upgrade_repo_acquire_expected_bytes", Help: "Size of the ISO being acquired, once known."}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "upgrade_repo_acquire_retries_total", Help: "Failed fetch attempts that were retried."}),
		verified: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "upgrade_repo_acquire_verifications_total", Help: "Checksum verifications, by result (ok, mismatch, reused)."}, []string{"result"}),
	}
	for _, c := range []prometheus.Collector{m.fetched, m.present, m.expected, m.retries, m.verified} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register acquire metrics: %w", err)
		}
	}
	return m, nil
}

// Cache is a directory of verified ISOs named by their sha512. It is safe for concurrent use by
// one process; two processes must not share a cache directory.
type Cache struct {
	dir      string
	log      *slog.Logger
	metrics  *Metrics
	attempts int
	initial  time.Duration
	max      time.Duration
	every    time.Duration
	mu       sync.Mutex // serialises Get per cache: one ISO is acquired at a time
}

// NewCache returns the cache in dir, creating the directory if needed.
func NewCache(dir string, opts ...Option) (*Cache, error) {
	if dir == "" {
		return nil, errors.New("cache: a directory is required")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cache %s: %w", dir, err)
	}
	c := &Cache{dir: dir, attempts: 10, initial: time.Second, max: 30 * time.Second, every: 5 * time.Second}
	for _, o := range opts {
		o(c)
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.attempts < 1 {
		c.attempts = 1
	}
	return c, nil
}

// Path returns where the verified ISO of sum lives in the cache.
func (c *Cache) Path(sum Checksum) string { return filepath.Join(c.dir, sum.Hex()+".iso") }

// PartialPath returns where the ISO of sum is being downloaded.
func (c *Cache) PartialPath(sum Checksum) string { return c.Path(sum) + ".partial" }

func (c *Cache) markerPath(sum Checksum) string { return c.Path(sum) + ".verified" }

// marker records what was verified, so that an unchanged file is not hashed again: the file's
// size, modification and change time and inode (a write moves the change time even when the
// modification time is put back), and the sha256 of every chunk, which a server checks each chunk
// against before serving it, for what the file system cannot tell (bit rot).
type marker struct {
	Checksum   string   `json:"checksum"`
	Size       int64    `json:"size"`
	ModTime    int64    `json:"modTimeUnixNano"`
	ChangeTime int64    `json:"changeTimeUnixNano,omitempty"`
	Inode      uint64   `json:"inode,omitempty"`
	ChunkSize  int64    `json:"chunkSize,omitempty"`
	Chunks     []string `json:"chunks,omitempty"`
}

func markerOf(fi fs.FileInfo, sum Checksum, sums chunks.Sums) marker {
	m := marker{Checksum: sum.String(), Size: fi.Size(), ModTime: fi.ModTime().UnixNano(),
		ChunkSize: sums.ChunkSize, Chunks: sums.Hex()}
	m.ChangeTime, m.Inode = fileIdentity(fi)
	return m
}

// describes reports whether m records the file fi as verified with checksum sum, chunk digests
// included.
func (m marker) describes(fi fs.FileInfo, sum Checksum) bool {
	now := markerOf(fi, sum, chunks.Sums{})
	return m.Checksum == now.Checksum && m.Size == now.Size && m.ModTime == now.ModTime &&
		m.ChangeTime == now.ChangeTime && m.Inode == now.Inode && len(m.Chunks) > 0
}

// Lookup returns the path of the verified ISO of sum when the cache has it. A file whose marker
// does not match it is hashed again; a file with the wrong content is removed.
func (c *Cache) Lookup(ctx context.Context, sum Checksum) (string, bool, error) {
	p := c.Path(sum)
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("cache lookup %s: %w", p, err)
	}
	var was marker
	if data, err := os.ReadFile(c.markerPath(sum)); err == nil {
		if json.Unmarshal(data, &was) == nil && was.describes(fi, sum) {
			c.metrics.verifiedInc("reused")
			c.log.Info("reusing verified ISO", "path", p, "size", fi.Size())
			return p, true, nil
		}
	}
	c.log.Info("verifying cached ISO", "path", p, "size", fi.Size())
	sums, err := verifyChunks(ctx, p, sum)
	if err != nil {
		if errors.Is(err, ErrChecksumMismatch) {
			c.metrics.verifiedInc("mismatch")
			c.logChanged(p, was, sums)
			c.log.Warn("removing cached ISO with the wrong checksum", "path", p, "error", err)
			os.Remove(p)
			os.Remove(c.markerPath(sum))
			return "", false, nil
		}
		return "", false, err
	}
	c.metrics.verifiedInc("ok")
	if err := c.writeMarker(p, sum, sums); err != nil {
		return "", false, err
	}
	return p, true, nil
}

func (c *Cache) writeMarker(p string, sum Checksum, sums chunks.Sums) error {
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("cache marker %s: %w", p, err)
	}
	data, _ := json.Marshal(markerOf(fi, sum, sums))
	tmp := c.markerPath(sum) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("cache marker %s: %w", p, err)
	}
	if err := os.Rename(tmp, c.markerPath(sum)); err != nil {
		return fmt.Errorf("cache marker %s: %w", p, err)
	}
	return nil
}

// Get returns the path of the verified ISO of sum, fetching it with f when the cache lacks it:
// the bytes go into the partial file (resuming what an earlier attempt left), failures are
// retried with backoff, the result is verified and renamed into place. A download with the wrong
// checksum is removed and Get returns an error wrapping ErrChecksumMismatch.
func (c *Cache) Get(ctx context.Context, sum Checksum, f Fetcher) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok, err := c.Lookup(ctx, sum); err != nil || ok {
		return p, err
	}
	partial := c.PartialPath(sum)
	wait := c.initial
	var lastErr error
	restarted := false
	// attempt counts the failed attempts in a row that brought no byte.
	for attempt := 1; attempt <= c.attempts; attempt++ {
		size, progressed, err := c.fetchOnce(ctx, partial, f)
		if err == nil {
			return c.finish(ctx, sum, partial, size)
		}
		lastErr = err
		if ctx.Err() != nil {
			return "", fmt.Errorf("acquire %s: %w", sum, ctx.Err())
		}
		if progressed && !errors.Is(err, ErrPermanent) {
			attempt, wait = 0, c.initial
			c.metrics.retry()
			c.log.Info("fetch interrupted after progress, resuming", "error", err)
			continue
		}
		if errors.Is(err, ErrPermanent) && !restarted {
			// What an earlier run left may be what the source refuses (a partial file longer
			// than the content): start over once from an empty file.
			if fi, serr := os.Stat(partial); serr == nil && fi.Size() > 0 {
				restarted = true
				c.log.Warn("fetch refused, downloading from the start", "path", partial, "had", fi.Size(), "error", err)
				if err := os.Remove(partial); err != nil {
					return "", fmt.Errorf("acquire %s: %w", sum, err)
				}
				continue
			}
		}
		if errors.Is(err, ErrPermanent) || attempt == c.attempts {
			break
		}
		c.metrics.retry()
		c.log.Warn("fetch failed, retrying", "attempt", attempt, "of", c.attempts, "wait", wait, "error", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", fmt.Errorf("acquire %s: %w", sum, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, c.max)
	}
	return "", fmt.Errorf("acquire %s: %w", sum, lastErr)
}

// fetchOnce runs one fetch attempt into the partial file. Whatever happens, the file keeps only
// the bytes written contiguously from its start, so the next attempt resumes without holes.
// progressed reports whether that prefix grew.
func (c *Cache) fetchOnce(ctx context.Context, partial string, f Fetcher) (size int64, progressed bool, err error) {
	file, err := os.OpenFile(partial, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return 0, false, fmt.Errorf("open %s: %w: %w", partial, err, ErrPermanent)
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		return 0, false, fmt.Errorf("stat %s: %w", partial, err)
	}
	from := fi.Size()
	p := newPartial(file, from, c.metrics)
	if from > 0 {
		c.log.Info("resuming download", "path", partial, "from", from)
	}

	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.reportProgress(done, p)
	}()
	size, ferr := f.Fetch(ctx, p, from)
	close(done)
	wg.Wait()

	have := p.contiguous()
	if ferr == nil && have < size {
		ferr = fmt.Errorf("fetch ended with %d of %d bytes", have, size)
	}
	if ferr == nil {
		have = size
	}
	if err := file.Truncate(have); err != nil && ferr == nil {
		ferr = fmt.Errorf("truncate %s: %w", partial, err)
	}
	if ferr == nil {
		if err := file.Sync(); err != nil {
			ferr = fmt.Errorf("sync %s: %w", partial, err)
		}
	}
	return size, have > from, ferr
}

func (c *Cache) reportProgress(done <-chan struct{}, p *partialFile) {
	t := time.NewTicker(c.every)
	defer t.Stop()
	last, lastAt := p.written.Load(), time.Now()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			w := p.written.Load()
			rate := float64(w-last) / now.Sub(lastAt).Seconds()
			c.log.Info("download progress", "bytes", p.contiguous(), "size", p.size.Load(), "fetched", w, "bytesPerSecond", int64(rate))
			last, lastAt = w, now
		}
	}
}

// finish verifies the complete partial file and renames it into place.
func (c *Cache) finish(ctx context.Context, sum Checksum, partial string, size int64) (string, error) {
	if c.metrics != nil {
		c.metrics.expected.Set(float64(size))
		c.metrics.present.Set(float64(size))
	}
	c.log.Info("verifying download", "path", partial, "size", size)
	sums, err := verifyChunks(ctx, partial, sum)
	if err != nil {
		if errors.Is(err, ErrChecksumMismatch) {
			c.metrics.verifiedInc("mismatch")
			os.Remove(partial)
			c.log.Error("removed download with the wrong checksum", "path", partial, "error", err)
		}
		return "", fmt.Errorf("acquire %s: %w", sum, err)
	}
	c.metrics.verifiedInc("ok")
	final := c.Path(sum)
	if err := os.Rename(partial, final); err != nil {
		return "", fmt.Errorf("acquire %s: %w", sum, err)
	}
	if err := c.writeMarker(final, sum, sums); err != nil {
		return "", err
	}
	c.log.Info("ISO verified", "path", final, "size", size)
	return final, nil
}

func (m *Metrics) verifiedInc(result string) {
	if m != nil {
		m.verified.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) retry() {
	if m != nil {
		m.retries.Inc()
	}
}

// partialFile is the io.WriterAt given to a Fetcher: it writes to the file and keeps the set of
// byte ranges written, so that only the contiguous prefix is trusted after a failure.
type partialFile struct {
	f       *os.File
	metrics *Metrics
	written atomic.Int64

	size atomic.Int64 // the content's size once a Fetcher reports it, -1 before

	mu     sync.Mutex
	ranges [][2]int64 // sorted, disjoint, half-open
}

var (
	_ io.WriterAt = (*partialFile)(nil)
	_ Sizer       = (*partialFile)(nil)
)

// SetSize records the content's total size.
func (p *partialFile) SetSize(size int64) {
	p.size.Store(size)
	if p.metrics != nil {
		p.metrics.expected.Set(float64(size))
	}
}

func newPartial(f *os.File, have int64, m *Metrics) *partialFile {
	p := &partialFile{f: f, metrics: m}
	p.size.Store(-1)
	if have > 0 {
		p.ranges = [][2]int64{{0, have}}
	}
	if m != nil {
		m.present.Set(float64(have))
	}
	return p
}

// WriteAt writes to the file and records the range. It is safe for concurrent use.
func (p *partialFile) WriteAt(b []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("write at a negative offset")
	}
	n, err := p.f.WriteAt(b, off)
	if n > 0 {
		p.add(off, off+int64(n))
		p.written.Add(int64(n))
		if p.metrics != nil {
			p.metrics.fetched.Add(float64(n))
			p.metrics.present.Set(float64(p.contiguous()))
		}
	}
	return n, err
}

func (p *partialFile) add(start, end int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// The common case: appending to the last range.
	if k := len(p.ranges); k > 0 && start >= p.ranges[k-1][0] && start <= p.ranges[k-1][1] {
		p.ranges[k-1][1] = max(p.ranges[k-1][1], end)
		return
	}
	p.ranges = append(p.ranges, [2]int64{start, end})
	sort.Slice(p.ranges, func(i, j int) bool { return p.ranges[i][0] < p.ranges[j][0] })
	merged := p.ranges[:1]
	for _, r := range p.ranges[1:] {
		last := &merged[len(merged)-1]
		if r[0] <= last[1] {
			last[1] = max(last[1], r[1])
			continue
		}
		merged = append(merged, r)
	}
	p.ranges = merged
}

// contiguous returns how many bytes from offset 0 have been written.
func (p *partialFile) contiguous() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ranges) == 0 || p.ranges[0][0] != 0 {
		return 0
	}
	return p.ranges[0][1]
}
