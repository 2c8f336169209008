package fetch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/peer/cache"
	"github.com/upgrade-repo/upgrade-repo/peer/fetch"
	"github.com/upgrade-repo/upgrade-repo/peer/inventory"
	"github.com/upgrade-repo/upgrade-repo/peer/memberlist"
	"github.com/upgrade-repo/upgrade-repo/peer/serve"
)

// hostEnv, when set, turns the test binary into one host of TestHostsInNetworkNamespaces: a
// gossip member with its directory, store, HTTP server and fetcher, configured by NETNS_* variables.
const hostEnv = "UPGRADE_REPO_PEER_NETNS_HOST"

// hostStatus is what a host reports on /status.
type hostStatus struct {
	Progress fetch.Progress `json:"progress"`
	Done     bool           `json:"done"`
	Error    string         `json:"error,omitempty"`
	Members  int            `json:"members"`
}

// runHost is the main of a host process; it returns the exit status.
func runHost() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := host(ctx); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "host:", err)
		return 1
	}
	return 0
}

func host(ctx context.Context) error {
	name, ip := os.Getenv("NETNS_NAME"), os.Getenv("NETNS_IP")
	log := testLog()
	dir := inventory.NewDirectory(name)
	store := cache.NewStore(dir)
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "8080"))
	if err != nil {
		return err
	}
	var h http.Handler = serve.NewHandler(log, store, nil)
	if pace, _ := strconv.Atoi(os.Getenv("NETNS_PACE")); pace > 0 {
		h = paced(h, pace)
	}
	var mu sync.Mutex
	var st hostStatus
	g, err := memberlist.New(log, name, ln.Addr().String(), dir, memberlist.WithBind(ip, 7946), memberlist.WithLocalTimers())
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", h)
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		s := st
		mu.Unlock()
		s.Members = len(g.Members())
		_ = json.NewEncoder(w).Encode(s)
	})
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	go func() { _ = g.Run(ctx) }()
	if seeds := os.Getenv("NETNS_SEEDS"); seeds != "" {
		if _, err := g.Join(ctx, strings.Split(seeds, ",")); err != nil {
			return err
		}
	}
	f, err := fetch.NewFetcher(log, dir, g, store, fetch.WithChunkSize(testChunk), fetch.WithSettle(0),
		fetch.WithHedgeAfter(2*time.Second), fetch.WithHTTPClient(&http.Client{}))
	if err != nil {
		return err
	}
	_, err = f.Fetch(ctx, fetch.Request{SHA512: os.Getenv("NETNS_SHA"), OriginURL: os.Getenv("NETNS_ORIGIN"),
		Path: filepath.Join(os.Getenv("NETNS_CACHE"), "release.iso")}, func(p fetch.Progress) {
		mu.Lock()
		st.Progress = p
		mu.Unlock()
	})
	mu.Lock()
	st.Done = err == nil
	if err != nil {
		st.Error = err.Error()
	}
	mu.Unlock()
	<-ctx.Done()
	return nil
}

// paced sends response bodies at about rate bytes a second.
func paced(h http.Handler, rate int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&pacedWriter{ResponseWriter: w, rate: rate}, r)
	})
}

type pacedWriter struct {
	http.ResponseWriter
	rate int
}

func (p *pacedWriter) Write(b []byte) (int, error) {
	total := 0
	for len(b) > 0 {
		n := min(len(b), 32<<10)
		w, err := p.ResponseWriter.Write(b[:n])
		total += w
		if err != nil {
			return total, err
		}
		b = b[n:]
		time.Sleep(time.Duration(n) * time.Second / time.Duration(p.rate))
	}
	return total, nil
}

// netnsLab is a switch namespace holding a bridge, with the root namespace and each host (its
// own network namespace) plugged into it by a veth pair. The bridge lives in a namespace of its
// own so that the root namespace's firewall (a FORWARD policy of DROP is common) stays out of it.
type netnsLab struct {
	t      *testing.T
	prefix string
	sw     string
}

func sh(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	require.NoError(t, err, "%s: %s", strings.Join(args, " "), out)
}

func newLab(t *testing.T) *netnsLab {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	for _, tool := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	id := strconv.Itoa(os.Getpid() % 100000)
	l := &netnsLab{t: t, prefix: "urp" + id, sw: "urp" + id + "sw"}
	t.Cleanup(func() {
		// Best effort: every name this lab may have made, whatever failed before. Deleting a
		// namespace deletes the veth ends in it, and with them their peers.
		for _, s := range []string{"a", "b", "c"} {
			_ = exec.Command("ip", "netns", "del", l.prefix+s).Run()
		}
		_ = exec.Command("ip", "netns", "del", l.sw).Run()
		_ = exec.Command("ip", "link", "del", l.prefix+"r").Run()
	})
	sh(t, "ip", "netns", "add", l.sw)
	sh(t, "ip", "-n", l.sw, "link", "add", "br0", "type", "bridge")
	sh(t, "ip", "-n", l.sw, "link", "set", "br0", "up")
	sh(t, "ip", "link", "add", l.prefix+"r", "type", "veth", "peer", "name", l.prefix+"s")
	sh(t, "ip", "link", "set", l.prefix+"s", "netns", l.sw)
	sh(t, "ip", "-n", l.sw, "link", "set", l.prefix+"s", "master", "br0")
	sh(t, "ip", "-n", l.sw, "link", "set", l.prefix+"s", "up")
	sh(t, "ip", "addr", "add", "10.231.0.1/24", "dev", l.prefix+"r")
	sh(t, "ip", "link", "set", l.prefix+"r", "up")
	return l
}

// addHost creates namespace prefix+s with address 10.231.0.<n> behind a veth on the bridge.
func (l *netnsLab) addHost(s string, n int) string {
	ns, swEnd, nsEnd := l.prefix+s, l.prefix+s+"h", l.prefix+s+"n"
	sh(l.t, "ip", "netns", "add", ns)
	sh(l.t, "ip", "link", "add", swEnd, "type", "veth", "peer", "name", nsEnd)
	sh(l.t, "ip", "link", "set", nsEnd, "netns", ns)
	sh(l.t, "ip", "link", "set", swEnd, "netns", l.sw)
	sh(l.t, "ip", "-n", l.sw, "link", "set", swEnd, "master", "br0")
	sh(l.t, "ip", "-n", l.sw, "link", "set", swEnd, "up")
	ip := "10.231.0." + strconv.Itoa(n)
	sh(l.t, "ip", "-n", ns, "addr", "add", ip+"/24", "dev", nsEnd)
	sh(l.t, "ip", "-n", ns, "link", "set", nsEnd, "up")
	sh(l.t, "ip", "-n", ns, "link", "set", "lo", "up")
	return ip
}

// cut takes the host's link to the bridge down: its packets vanish, no connection is reset.
func (l *netnsLab) cut(s string) { sh(l.t, "ip", "-n", l.sw, "link", "set", l.prefix+s+"h", "down") }

// start runs a host process in namespace prefix+s, entered with nsenter.
func (l *netnsLab) start(s string, env ...string) {
	exe, err := os.Executable()
	require.NoError(l.t, err)
	cmd := exec.Command("nsenter", "--net=/run/netns/"+l.prefix+s, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), append([]string{hostEnv + "=1", "NETNS_NAME=" + s, "NETNS_CACHE=" + l.t.TempDir()}, env...)...)
	if os.Getenv("UPGRADE_REPO_TEST_LOG") != "" {
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	}
	require.NoError(l.t, cmd.Start())
	l.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
}

func hostState(ip string) (hostStatus, error) {
	c := &http.Client{Timeout: time.Second}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://" + ip + ":8080/status")
	if err != nil {
		return hostStatus{}, err
	}
	defer resp.Body.Close()
	var s hostStatus
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(b, &s)
}

// waitHost polls a host's status, up to a deadline, until cond holds.
func waitHost(t *testing.T, ip, what string, cond func(hostStatus) bool) hostStatus {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s, err := hostState(ip)
		if err == nil && s.Error != "" {
			t.Fatalf("host %s: %s", ip, s.Error)
		}
		if err == nil && cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (last: %+v, %v)", what, s, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Three hosts in their own network namespaces, each serving at 2 MB/s: a gets the ISO from the
// origin, c from a, then b from both, and a's link is cut in the middle of b's transfer. b completes from
// c (the stalled transfers are hedged) without the origin.
func TestHostsInNetworkNamespaces(t *testing.T) {
	lab := newLab(t)
	data, sha := isoData(t, 16<<20)
	o := newOrigin(t, data)
	// The origin listens on the bridge address as well, for the hosts.
	ln, err := net.Listen("tcp", "10.231.0.1:0")
	require.NoError(t, err)
	osrv := &http.Server{Handler: o.srv.Config.Handler}
	go func() { _ = osrv.Serve(ln) }()
	t.Cleanup(func() { _ = osrv.Close() })
	originURL := "http://" + ln.Addr().String() + "/release.iso"

	ipA, ipB, ipC := lab.addHost("a", 11), lab.addHost("b", 12), lab.addHost("c", 13)
	common := []string{"NETNS_SHA=" + sha, "NETNS_PACE=2000000"}
	lab.start("a", append(common, "NETNS_IP="+ipA, "NETNS_ORIGIN="+originURL)...)
	waitHost(t, ipA, "a to fetch from the origin", func(s hostStatus) bool { return s.Done })
	require.EqualValues(t, len(data), o.sent.Load())

	lab.start("c", append(common, "NETNS_IP="+ipC, "NETNS_SEEDS="+ipA+":7946")...)
	waitHost(t, ipC, "c to fetch from a", func(s hostStatus) bool { return s.Done })

	lab.start("b", append(common, "NETNS_IP="+ipB, "NETNS_SEEDS="+ipA+":7946,"+ipC+":7946", "NETNS_ORIGIN="+originURL)...)
	waitHost(t, ipB, "b to be under way", func(s hostStatus) bool { return s.Progress.Held >= 2*testChunk })
	lab.cut("a")
	s := waitHost(t, ipB, "b to finish without a", func(s hostStatus) bool { return s.Done })
	require.True(t, s.Progress.Verified)
	require.EqualValues(t, len(data), s.Progress.FromPeers, "c had every chunk: the origin is not needed")
	require.EqualValues(t, len(data), o.sent.Load(), "the origin sent one copy in all")
	_, err = hostState(ipA)
	require.Error(t, err, "a must be cut off")
}
