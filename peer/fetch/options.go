package fetch

import (
	"math"
	"net/http"
	"time"

	"github.com/upgrade-repo/upgrade-repo/peer"
)

type fetchOptions struct {
	client     *http.Client
	token      string
	metrics    *peer.Metrics
	chunkSize  int64
	parallel   int
	originPar  int
	hedgeAfter time.Duration
	stallAfter time.Duration
	avoidFor   time.Duration
	settle     time.Duration
	idle       time.Duration
	tick       time.Duration
	attempts   int
	initial    time.Duration
	maxWait    time.Duration
	every      time.Duration
}

// Option configures a Fetcher.
type Option func(*fetchOptions)

// WithHTTPClient sets the client for peers and the origin (default: a client with no overall
// timeout; stalls are caught by the hedging and stall timers).
func WithHTTPClient(c *http.Client) Option { return func(o *fetchOptions) { o.client = c } }

// WithToken sets the bearer token sent to peers (never to the origin) to prove membership of the
// ring; see Token.
func WithToken(token string) Option { return func(o *fetchOptions) { o.token = token } }

// WithMetrics records bytes fetched and verification failures.
func WithMetrics(m *peer.Metrics) Option { return func(o *fetchOptions) { o.metrics = m } }

// WithChunkSize sets the chunk size used when no peer advertises one (default cache.DefaultChunkSize).
func WithChunkSize(n int64) Option { return func(o *fetchOptions) { o.chunkSize = n } }

// WithParallel sets how many chunks are fetched from peers at once (default 4).
func WithParallel(n int) Option { return func(o *fetchOptions) { o.parallel = max(1, n) } }

// WithOriginParallel sets how many chunks are fetched from the origin at once (default 2).
func WithOriginParallel(n int) Option {
	return func(o *fetchOptions) { o.originPar = max(1, n) }
}

// WithHedgeAfter sets after how long a chunk still in flight is asked from a second source too
// (default 5s).
func WithHedgeAfter(d time.Duration) Option { return func(o *fetchOptions) { o.hedgeAfter = d } }

// WithStallAfter sets how long a node waits for the owner of a chunk to fetch it from the origin
// before fetching it itself (default 10s). The owner is deemed stalled only when neither the
// directory nor the owner's own list of chunks, asked directly once the directory has been quiet
// that long, shows a new chunk within it.
func WithStallAfter(d time.Duration) Option { return func(o *fetchOptions) { o.stallAfter = d } }

// WithAvoidFor sets how long a peer that sent bad bytes or failed is avoided (default 1m; a peer
// that failed without sending bad bytes is avoided a tenth of that).
func WithAvoidFor(d time.Duration) Option { return func(o *fetchOptions) { o.avoidFor = d } }

// WithSettle sets how long a fetch waits at most, before it asks the origin for anything, for the
// nodes starting at the same time to learn of each other (default 3s). The wait ends after a
// third of it when every live member advertises the ISO and the membership did not change.
func WithSettle(d time.Duration) Option { return func(o *fetchOptions) { o.settle = d } }

// WithIdleTimeout sets how long a chunk's response may go without a byte before it is abandoned
// and the chunk asked again (default 30s): an origin that stalls without closing the connection
// would otherwise hold its chunk for ever, as no peer hedges for it.
func WithIdleTimeout(d time.Duration) Option {
	return func(o *fetchOptions) {
		if d <= 0 {
			d = time.Duration(math.MaxInt64) // no limit
		}
		o.idle = d
	}
}

// WithRetry sets how a failing origin is retried: after a failed request no other is made for a
// wait that starts at initial (default 1s) and doubles up to max (default 30s); a chunk that comes
// starts it over. Once attempts failures in a row (default 10; 0 means no limit) brought nothing,
// or once the origin refuses outright (ErrOriginRefused), Fetch gives up, unless peers still hold
// chunks it lacks. With the defaults, a dead origin is given up after about two and a half
// minutes; an origin that cuts every connection is followed to the end, as every request brings
// bytes.
func WithRetry(attempts int, initial, max time.Duration) Option {
	return func(o *fetchOptions) {
		o.attempts, o.initial, o.maxWait = max0(attempts), initial, max
	}
}

func max0(n int) int { return max(n, 0) }

// WithProgressInterval sets how often the progress of a download is logged (default 5s).
func WithProgressInterval(d time.Duration) Option { return func(o *fetchOptions) { o.every = d } }
