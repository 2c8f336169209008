package agent

import (
	"encoding/json"
	"net/http"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/peer/fetch"
	"github.com/upgrade-repo/upgrade-repo/preload"
)

// The states of the node's ISO, as /v1/status names them.
const (
	ISOPending   = "pending"
	ISOFetching  = "fetching"
	ISOVerifying = "verifying"
	ISOVerified  = "verified"
	ISOFailed    = "failed"
)

// Status is the node's state: the body of /v1/status.
type Status struct {
	// Node is the node's name.
	Node string `json:"node"`
	// Ready is true while the repo serves a verified ISO.
	Ready bool `json:"ready"`
	// Members is the number of live gossip members, this node included.
	Members int `json:"members"`
	// ISO is the state of the ISO this node holds or gets.
	ISO ISOStatus `json:"iso"`
	// Preload is the preload's status, once one started.
	Preload *preload.Status `json:"preload,omitempty"`
	// Ingest is how the node's image blobs are written into containerd (Direct or
	// ContentService); empty without an image store.
	Ingest v1beta1.IngestPath `json:"ingest,omitempty"`
	// Unpack is how the node's images are unpacked (OnePass or Containerd); empty when they
	// are not.
	Unpack v1beta1.UnpackPath `json:"unpack,omitempty"`
	// Error is the last error of the ISO's acquisition, or why the ISO failed.
	Error string `json:"error,omitempty"`
	// Plan is the UpgradePlan whose ISO the agent holds, when it follows the cluster's plans.
	Plan string `json:"plan,omitempty"`
	// RestoredTotal counts the release's images that went missing from the image store while
	// the node held the ISO and were imported again; Restored are the latest, oldest first.
	RestoredTotal int64             `json:"restoredTotal,omitempty"`
	Restored      []preload.Restore `json:"restored,omitempty"`
	// ImagesPinned is how many of the release's images carry the CRI plugin's pinned label, as
	// the guard of the release's images last counted them; 0 until it counted.
	ImagesPinned int64 `json:"imagesPinned,omitempty"`
	// Step is what the node's upgrade step last reported (POST /v1/step); nil until one reports.
	// The board never changes a step it holds: it replaces it whole.
	Step *v1beta1.RepoNodeStep `json:"step,omitempty"`
	// Cleanup is the last removal of earlier releases' images (see clean.go); a reset keeps it.
	Cleanup *preload.Cleanup `json:"cleanup,omitempty"`
	// Forecast is the last measure of a judged plan's release (see forecast.go); a reset keeps
	// it. The board never changes the one it holds: it replaces it whole.
	Forecast *v1beta1.RepoNodeForecast `json:"forecast,omitempty"`
}

// ISOStatus is the state of one ISO on this node.
type ISOStatus struct {
	// SHA512 is the ISO's digest in hex.
	SHA512 string `json:"sha512,omitempty"`
	// State is one of ISOPending, ISOFetching, ISOVerifying, ISOVerified, ISOFailed.
	State string `json:"state"`
	fetch.Progress
}

// Board holds the node's status for /v1/status and the RepoNode. It is safe for concurrent use;
// its ServeHTTP serves the status as JSON.
type Board struct {
	members func() int
	// ingest says how image blobs are written into the node's containerd now; nil: no image store.
	ingest func() v1beta1.IngestPath
	// unpack says how images are unpacked now; nil: no image store.
	unpack func() v1beta1.UnpackPath
	// changed receives a token after every change (buffer of one): the report loop's wake-up.
	changed chan struct{}

	mu       sync.Mutex
	s        Status
	preloadr *preload.Preloader
	// checksum is the ISO checksum the RepoNode reports, written as the plan wrote it: the
	// sequencer compares the two strings.
	checksum string
	// preloadErr says why a preload could not even start (no preloader to report it).
	preloadErr string
}

var _ http.Handler = (*Board)(nil)

// NewBoard returns the board of node, holding no ISO; members counts the live gossip members.
func NewBoard(node string, members func() int) *Board {
	b := &Board{members: members, changed: make(chan struct{}, 1)}
	b.s.Node = node
	b.s.ISO.State = ISOPending
	return b
}

// update changes the status under the board's lock.
func (b *Board) update(f func(*Status)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(&b.s)
	b.notify()
}

// notify tells the report loop that the board changed; it never blocks.
func (b *Board) notify() {
	select {
	case b.changed <- struct{}{}:
	default:
	}
}

// changes returns the channel that receives a token after changes of the board.
func (b *Board) changes() <-chan struct{} { return b.changed }

// Snapshot returns the current status, with the members counted and the preload's progress now.
func (b *Board) Snapshot() Status {
	b.mu.Lock()
	s := b.s
	p := b.preloadr
	b.mu.Unlock()
	if b.members != nil {
		s.Members = b.members()
	}
	if b.ingest != nil {
		s.Ingest = b.ingest()
	}
	if b.unpack != nil {
		s.Unpack = b.unpack()
	}
	if p != nil {
		st := p.Status()
		s.Preload = &st
	}
	return s
}

// ServeHTTP serves the status as JSON.
func (b *Board) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(b.Snapshot())
}

// plan records the plan whose ISO the agent holds, and the checksum as the plan writes it.
func (b *Board) plan(name, checksum string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.s.Plan, b.checksum = name, checksum
	b.notify()
}

// failed marks the ISO failed with msg.
func (b *Board) failed(msg string) {
	b.update(func(s *Status) { s.ISO.State, s.Error = ISOFailed, msg })
}

// preloading records the preloader whose status the board reports, or why none could start.
func (b *Board) preloading(p *preload.Preloader, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p != nil {
		b.preloadr = p
	}
	if err != nil && b.preloadr == nil {
		b.preloadErr = err.Error()
	}
	b.notify()
}

// reset returns the board to a node that holds no ISO.
func (b *Board) reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.s.Ready, b.s.ISO, b.s.Error, b.s.Plan = false, ISOStatus{State: ISOPending}, "", ""
	b.s.RestoredTotal, b.s.Restored, b.s.ImagesPinned = 0, nil, 0
	b.checksum = ""
	b.preloadr = nil
	b.preloadErr = ""
	b.notify()
}

// maxRestored is how many of the latest restores the board keeps.
const maxRestored = 10

// restored records images put back into the image store.
func (b *Board) restored(rs []preload.Restore) {
	b.update(func(s *Status) {
		s.RestoredTotal += int64(len(rs))
		s.Restored = append(s.Restored, rs...)
		if n := len(s.Restored) - maxRestored; n > 0 {
			s.Restored = append([]preload.Restore(nil), s.Restored[n:]...)
		}
	})
}

// pinned records how many of the release's images are pinned; the report loop is woken only when
// the count changed, since the guard counts at every check.
func (b *Board) pinned(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.s.ImagesPinned == int64(n) {
		return
	}
	b.s.ImagesPinned = int64(n)
	b.notify()
}

// step records st as the node step's last report, replacing the one before.
func (b *Board) step(st *v1beta1.RepoNodeStep) {
	b.update(func(s *Status) { s.Step = st })
}

// restoreStep records st, the report a RepoNode carried when the agent started, unless a step
// reported since.
func (b *Board) restoreStep(st *v1beta1.RepoNodeStep) {
	if st == nil {
		return
	}
	b.update(func(s *Status) {
		if s.Step == nil {
			s.Step = st
		}
	})
}

// keepStepOf drops the step's report unless it is of the plan named plan: the plans the agent
// follows have moved on from the plan of the report (or there is none).
func (b *Board) keepStepOf(plan string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.s.Step != nil && b.s.Step.Plan != plan {
		b.s.Step = nil
		b.notify()
	}
}

// isoStates maps the board's ISO states to the RepoNode's.
var isoStates = map[string]v1beta1.ISOState{
	ISOPending:   v1beta1.ISOPending,
	ISOFetching:  v1beta1.ISODownloading,
	ISOVerifying: v1beta1.ISOVerifying,
	ISOVerified:  v1beta1.ISOReady,
	ISOFailed:    v1beta1.ISOFailed,
}

// RepoNode returns the board as a RepoNode status; url is the node's repo base URL.
func (b *Board) RepoNode(url string) v1beta1.RepoNodeStatus {
	s := b.Snapshot()
	b.mu.Lock()
	sum, preloadErr := b.checksum, b.preloadErr
	b.mu.Unlock()
	if sum == "" {
		sum = s.ISO.SHA512
	}
	var st v1beta1.RepoNodeStatus
	st.ISO = v1beta1.RepoNodeISO{
		Checksum: sum, State: isoStates[s.ISO.State],
		BytesDone: s.ISO.Held, BytesTotal: s.ISO.Size, BytesFromPeers: s.ISO.FromPeers, BytesFromOrigin: s.ISO.FromOrigin,
	}
	if st.ISO.State == "" {
		st.ISO.State = v1beta1.ISOPending
	}
	if st.ISO.State == v1beta1.ISOFailed || st.ISO.State == v1beta1.ISODownloading {
		st.ISO.Message = s.Error
	}
	if s.Ready {
		st.Repo = v1beta1.RepoNodeRepo{Ready: true, URL: url}
	}
	if s.Step != nil {
		step := *s.Step
		st.Step = &step
	}
	if preloadErr != "" && s.Preload == nil {
		st.Preload = v1beta1.RepoNodePreload{State: v1beta1.PreloadFailed, Reason: "PreloadNotStarted", Message: preloadErr}
	}
	if p := s.Preload; p != nil {
		st.Preload = v1beta1.RepoNodePreload{
			State: v1beta1.PreloadState(p.State), Reason: p.Reason, Message: p.Message,
			ImagesDone: int64(p.ImagesPresent), ImagesTotal: int64(p.ImagesTotal),
			BytesDone: p.BytesRead, BytesTotal: p.BytesTotal, Ingest: s.Ingest, Unpack: s.Unpack,
		}
		switch st.Preload.State {
		case v1beta1.PreloadRunning, v1beta1.PreloadDone, v1beta1.PreloadFailed:
		default:
			// A preload that has not planned yet has no state the RepoNode knows.
			st.Preload.State = ""
		}
	}
	st.Cleanup = repoNodeCleanup(s.Cleanup)
	if s.Forecast != nil {
		st.Forecast = s.Forecast.DeepCopy()
	}
	st.Preload.RestoredTotal = s.RestoredTotal
	st.Preload.ImagesPinned = s.ImagesPinned
	for _, r := range s.Restored {
		st.Preload.Restored = append(st.Preload.Restored, v1beta1.RepoNodeRestore{Image: r.Image, Source: r.Source, Time: metav1.NewTime(r.Time)})
	}
	return st
}
