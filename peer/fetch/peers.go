package fetch

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/upgrade-repo/upgrade-repo/chunks"
	"github.com/upgrade-repo/upgrade-repo/internal/redact"
	"github.com/upgrade-repo/upgrade-repo/peer"
)

type chunkList struct {
	mu      sync.Mutex
	fetched time.Time
	digests []string
}

// fetchChunk fetches one chunk and verifies what it can: the length always, and for a peer's
// bytes the digest (chunks.Sum) that the other holders advertise.
func (r *run) fetchChunk(ctx context.Context, j *job) result {
	off := int64(j.chunk) * r.iso.ChunkSize()
	n := r.iso.ChunkLen(j.chunk)
	if j.source == originSource {
		data := r.getBuf(n)
		if err := r.fetchOriginChunk(ctx, j.chunk, off, data); err != nil {
			r.putBuf(data)
			return result{err: err}
		}
		return result{data: data, sum: chunks.Sum(data)}
	}
	url := "http://" + j.addr + "/v1/iso/" + r.req.SHA512
	w, err := r.watchedGet(ctx, url, off, n, true)
	if err != nil {
		return result{err: err}
	}
	defer w.close()
	if w.resp.StatusCode != http.StatusPartialContent {
		return result{err: fmt.Errorf("GET %s chunk %d: status %s", redact.URL(url), j.chunk, w.resp.Status)}
	}
	data := r.getBuf(n)
	if _, err := io.ReadFull(w.body, data); err != nil {
		r.putBuf(data)
		return result{err: fmt.Errorf("GET %s chunk %d: %w", redact.URL(url), j.chunk, w.cause(err))}
	}
	sum := chunks.Sum(data)
	want, vouched := r.vouch(ctx, j.chunk, j.source)
	if !vouched {
		return result{data: data, sum: sum, weak: true}
	}
	if !bytes.Equal(want, sum[:]) {
		r.putBuf(data)
		return result{bad: true, err: fmt.Errorf("chunk %d from %s: %s %x, other holders agree on %x: %w", j.chunk, j.source, chunks.Algorithm, sum, want, peer.ErrVerification)}
	}
	return result{data: data, sum: sum}
}

// maxUnknownVoters bounds how many members whose inventory is not known yet are asked to vouch.
const maxUnknownVoters = 8

// vouch returns the digest of chunk c that a strict majority of the holders other than source
// advertise, refreshing their lists when they do not cover c yet. The holders are those the
// directory knows of, and the live members whose inventory it has not received yet: a node that
// just joined through one seed knows only the seed's inventory until gossip brings the others',
// and their chunk lists answer at once.
func (r *run) vouch(ctx context.Context, c int, source string) ([]byte, bool) {
	addrs := map[string]string{}
	for _, m := range r.f.members.Members() {
		if m.Name != r.f.dir.Self() && m.Name != source && m.Addr != "" {
			addrs[m.Name] = m.Addr
		}
	}
	ask := map[string]bool{}
	for _, h := range r.f.dir.ISOHolders(r.req.SHA512) {
		if _, live := addrs[h.Member]; live && h.ISO.Has(c) {
			ask[h.Member] = true
		}
	}
	unknown := 0
	for _, name := range slices.Sorted(maps.Keys(addrs)) {
		// A few suffice, and a member that has died unnoticed costs a timeout each.
		if !r.f.dir.Knows(name) && !ask[name] && unknown < maxUnknownVoters {
			ask[name] = true
			unknown++
		}
	}
	votes := map[string]int{}
	voters := 0
	for name := range ask {
		if d := r.listDigest(ctx, name, addrs[name], c); d != "" {
			votes[d]++
			voters++
		}
	}
	for d, v := range votes {
		if 2*v > voters {
			raw, err := hex.DecodeString(d)
			return raw, err == nil
		}
	}
	return nil, false
}

// listDigest returns the digest a holder advertises for chunk c. The holder's list is fetched
// again when it does not cover c yet, at most once a second; concurrent callers wait for the
// fetch in progress.
func (r *run) listDigest(ctx context.Context, member, addr string, c int) string {
	l := r.list(member)

	l.mu.Lock()
	defer l.mu.Unlock()
	if c < len(l.digests) && l.digests[c] != "" {
		return l.digests[c]
	}
	if time.Since(l.fetched) < time.Second {
		return ""
	}
	l.fetched = time.Now()
	cl, err := r.fetchList(ctx, addr, 5*time.Second)
	if err != nil {
		return ""
	}
	l.digests = cl.Digests
	return cl.Digests[c]
}

// list returns the chunk list kept for member, empty at first.
func (r *run) list(member string) *chunkList {
	r.listMu.Lock()
	defer r.listMu.Unlock()
	l := r.lists[member]
	if l == nil {
		l = &chunkList{}
		r.lists[member] = l
	}
	return l
}

// keepList keeps a member's chunk list, received in a probe, for vouching, unless a fetch of it
// is in progress.
func (r *run) keepList(member string, digests []string) {
	l := r.list(member)
	if l.mu.TryLock() {
		l.digests, l.fetched = digests, time.Now()
		l.mu.Unlock()
	}
}

// fetchList asks the member at addr for its chunk list of the ISO, within timeout.
func (r *run) fetchList(ctx context.Context, addr string, timeout time.Duration) (peer.ChunkList, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	url := "http://" + addr + "/v1/iso/" + r.req.SHA512 + "/chunks"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return peer.ChunkList{}, redact.Error(err)
	}
	r.f.authorize(req)
	resp, err := r.f.o.client.Do(req)
	if err != nil {
		return peer.ChunkList{}, redact.Error(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return peer.ChunkList{}, fmt.Errorf("GET %s: status %s", url, resp.Status)
	}
	var cl peer.ChunkList
	if err := json.NewDecoder(io.LimitReader(resp.Body, int64(r.n)*80+1024)).Decode(&cl); err != nil {
		return peer.ChunkList{}, fmt.Errorf("GET %s: %w", url, err)
	}
	if len(cl.Digests) != r.n || cl.Size != r.iso.Size() || cl.ChunkSize != r.iso.ChunkSize() {
		return peer.ChunkList{}, fmt.Errorf("GET %s: a list of %d chunks of %d bytes for %d bytes, not %d of %d for %d",
			url, len(cl.Digests), cl.ChunkSize, cl.Size, r.n, r.iso.ChunkSize(), r.iso.Size())
	}
	return cl, nil
}
