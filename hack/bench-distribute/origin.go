// Command origin is the release origin of make bench-distribute: it serves one file over HTTP
// (GET, HEAD, single ranges) with a shared egress budget, as a WAN origin would, and counts every
// byte it sends. GET /stats returns {"bytes": N, "requests": N} and POST /reset zeroes them.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9000", "address to serve on")
	file := flag.String("file", "", "the file to serve at /release.iso")
	rate := flag.Int64("rate", 0, "egress budget shared by all clients, bytes a second (0: unlimited)")
	flag.Parse()
	if err := run(*listen, *file, *rate); err != nil {
		fmt.Fprintf(os.Stderr, "origin: %v\n", err)
		os.Exit(1)
	}
}

func run(listen, file string, rate int64) error {
	if _, err := os.Stat(file); err != nil {
		return err
	}
	var sent, requests atomic.Int64
	lim := newLimiter(rate)
	mux := http.NewServeMux()
	mux.HandleFunc("/release.iso", func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		f, err := os.Open(file)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		http.ServeContent(&meter{ResponseWriter: w, ctx: r.Context(), sent: &sent, lim: lim}, r, "release.iso", st.ModTime(), f)
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]int64{"bytes": sent.Load(), "requests": requests.Load()})
	})
	mux.HandleFunc("POST /reset", func(w http.ResponseWriter, _ *http.Request) {
		sent.Store(0)
		requests.Store(0)
	})
	return http.ListenAndServe(listen, mux)
}

// meter counts and paces what a response writes.
type meter struct {
	http.ResponseWriter
	ctx  context.Context
	sent *atomic.Int64
	lim  *limiter
}

func (m *meter) Write(p []byte) (int, error) {
	total := 0
	for len(p) > 0 {
		n := min(len(p), 64<<10)
		if err := m.lim.wait(m.ctx, int64(n)); err != nil {
			return total, err
		}
		w, err := m.ResponseWriter.Write(p[:n])
		total += w
		m.sent.Add(int64(w))
		if err != nil {
			return total, err
		}
		p = p[n:]
	}
	return total, nil
}

// limiter is a token bucket shared by all responses.
type limiter struct {
	rate   int64
	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func newLimiter(rate int64) *limiter { return &limiter{rate: rate, last: time.Now()} }

func (l *limiter) wait(ctx context.Context, n int64) error {
	if l.rate <= 0 {
		return nil
	}
	l.mu.Lock()
	now := time.Now()
	l.tokens = min(l.tokens+now.Sub(l.last).Seconds()*float64(l.rate), float64(l.rate)/10)
	l.last = now
	l.tokens -= float64(n)
	deficit := -l.tokens
	l.mu.Unlock()
	if deficit <= 0 {
		return nil
	}
	t := time.NewTimer(time.Duration(deficit / float64(l.rate) * float64(time.Second)))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
