package sequencer_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1beta1 "github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/iso/isotest"
)

// releaseOrigin serves a real release ISO holding releaseYAML, counting requests and bytes;
// with ranges false it ignores Range headers, as some origins do.
func releaseOrigin(t *testing.T, releaseYAML string, ranges bool) (url string, requests, sent *atomic.Int64) {
	t.Helper()
	isotest.RequireXorriso(t)
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "harvester-release.yaml"), []byte(releaseYAML), 0o644))
	// Larger than what loopback sockets buffer (a few MB each way), so that the bytes an origin
	// writes count what a reader took, not what the kernel absorbed.
	require.NoError(t, os.WriteFile(filepath.Join(src, "padding.img"), make([]byte, 64<<20), 0o644))
	iso := isotest.Build(t, src)
	requests, sent = &atomic.Int64{}, &atomic.Int64{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if !ranges {
			r.Header.Del("Range")
		}
		f, err := os.Open(iso)
		require.NoError(t, err)
		defer f.Close()
		st, _ := f.Stat()
		http.ServeContent(&countingWriter{ResponseWriter: w, n: sent}, r, "", st.ModTime(), f)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/harvester-v1.6.0.iso", requests, sent
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.n.Add(int64(n))
	return n, err
}

// pointVersion makes the cluster's Version name the ISO at url.
func pointVersion(t *testing.T, k *cluster, url string) {
	t.Helper()
	var v v1beta1.Version
	require.NoError(t, k.c.Get(t.Context(), client.ObjectKey{Name: "v1.6.0"}, &v))
	v.Spec.ISOURL = url
	require.NoError(t, k.c.Update(t.Context(), &v))
}

// A plan whose ISO refuses the installed version fails in Initializing, from a few hundred KB
// read through ranges, and no agent is told to fetch it.
func TestReconcileRefusesTheReleaseBeforeDownload(t *testing.T) {
	t.Parallel()
	url, requests, sent := releaseOrigin(t, "harvester: v1.6.0\nminUpgradableVersion: v1.5.3\n", true)
	k := newCluster(t, newPlan("up", nil)) // installed: v1.5.2
	pointVersion(t, k, url)
	start := time.Now()
	var p *v1beta1.UpgradePlan
	for range 5 {
		k.reconcile("up")
		if p = k.plan("up"); p.Status.Phase == v1beta1.PhaseFailed {
			break
		}
	}
	require.Equal(t, v1beta1.PhaseFailed, p.Status.Phase)
	require.Equal(t, v1beta1.PhaseInitializing, p.Status.FailedPhase)
	c := meta.FindStatusCondition(p.Status.Conditions, v1beta1.ConditionDegraded)
	require.Equal(t, "PolicyCheckFailed", c.Reason)
	require.Contains(t, c.Message, "v1.5.3")
	require.True(t, p.Status.Agents == nil || !p.Status.Agents.Hold, "no agent fetches the ISO")
	require.LessOrEqual(t, requests.Load(), int64(16))
	require.LessOrEqual(t, sent.Load(), int64(1<<20))
	t.Logf("refused in %s after %d requests, %d bytes of the ISO", time.Since(start).Round(time.Millisecond), requests.Load(), sent.Load())
}

// Where the origin does not serve ranges, the plan goes on and says it is judged after the
// download, having read no more than a few KB.
func TestReconcileJudgesAfterDownloadWithoutRanges(t *testing.T) {
	t.Parallel()
	url, _, sent := releaseOrigin(t, "harvester: v1.6.0\nminUpgradableVersion: v1.5.3\n", false)
	k := newCluster(t, newPlan("up", nil))
	pointVersion(t, k, url)
	k.reconcile("up")
	k.reconcile("up")
	p := k.plan("up")
	require.Equal(t, v1beta1.PhaseInitialized, p.Status.Phase, "refused only once the verified metadata says so")
	c := meta.FindStatusCondition(p.Status.Conditions, v1beta1.ConditionReleaseJudged)
	require.Equal(t, metav1.ConditionFalse, c.Status)
	require.Contains(t, c.Message, "does not serve ranges")
	require.Less(t, sent.Load(), int64(32<<20), "the whole ISO (64 MiB) is not read to judge it")
}
