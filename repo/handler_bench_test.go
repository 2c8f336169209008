package repo

import (
	"net/http"
	"testing"
	"testing/fstest"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// BenchmarkSmallFile measures the server's own cost of answering GET /harvester-release.yaml
// (routing, metrics, headers, body from memory), without the network.
func BenchmarkSmallFile(b *testing.B) {
	m, err := NewMetrics(prometheus.NewRegistry())
	require.NoError(b, err)
	h, err := New(fstest.MapFS{"harvester-release.yaml": {Data: make([]byte, 600)}}, WithMetrics(m), WithIdentity("x"))
	require.NoError(b, err)
	s := NewServer(m, nil, nil)
	s.SetHandler(h)
	req, err := http.NewRequest(http.MethodGet, "http://x/harvester-release.yaml", nil)
	require.NoError(b, err)
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		s.ServeHTTP(w, req)
	}
}
