package fetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/upgrade-repo/upgrade-repo/peer"
)

// maxRechecks bounds how many times the unvouched chunks are checked again against the holders
// before the origin is asked for them.
const maxRechecks = 3

// repair runs when the whole ISO fails its sha512. The chunks taken from a peer without another
// holder vouching for them are first checked again against the holders known now (the directory
// may have learnt of more since): the ones found bad are dropped, their sources avoided, and
// repair returns refetch true so that they are fetched again from other sources. When that finds
// nothing, the unvouched chunks are fetched from the origin and compared; the peers whose chunks
// differ are avoided. It returns nil when the ISO then verifies.
func (r *run) repair(ctx context.Context, mismatch error) (refetch bool, err error) {
	if !errors.Is(mismatch, peer.ErrVerification) {
		return false, fmt.Errorf("fetch ISO %.16s: %w", r.req.SHA512, mismatch)
	}
	r.f.o.metrics.Failed(peer.KindISO)
	if len(r.weak) > 0 && r.rechecks < maxRechecks {
		r.rechecks++
		confirmed, bad, bySource := r.recheck(ctx)
		r.f.log.Warn("ISO does not match its sha512: checked the chunks no other holder had vouched for against the holders known now",
			"unvouched", len(r.weak)+bad, "confirmed", confirmed, "bad", bad, "unconfirmed", len(r.weak)-confirmed,
			"bad_by_peer", bySource)
		if bad > 0 {
			return true, nil
		}
	}
	if len(r.weak) == 0 {
		r.resetAll()
		return false, fmt.Errorf("ISO %.16s: the bytes fetched (%d from the origin, %d from peers that other holders vouched for) do not match the checksum; the download is removed: %w",
			r.req.SHA512, r.fromOrigin, r.fromPeers, mismatch)
	}
	if r.req.OriginURL == "" {
		r.resetAll()
		return false, fmt.Errorf("ISO %.16s: %d chunks no other holder vouched for, and no origin to compare them with; the download is removed: %w",
			r.req.SHA512, len(r.weak), mismatch)
	}
	r.f.log.Warn("ISO does not match its sha512: fetching the chunks no other holder vouched for from the origin, to compare", "chunks", len(r.weak))
	var differed, matched int
	var originBytes int64
	bySource := map[string]int{}
	for c, src := range r.weak {
		res := r.fetchChunk(ctx, &job{chunk: c, source: originSource})
		if res.err != nil {
			r.f.log.Warn("repair from the origin failed", "compared", differed+matched, "of", len(r.weak)+differed+matched,
				"origin_bytes", originBytes, "chunk", c, "err", res.err)
			return false, fmt.Errorf("repair chunk %d from the origin: %w", c, res.err)
		}
		n := int64(len(res.data))
		originBytes += n
		r.f.o.metrics.Fetched(peer.SourceOrigin, n)
		prev := r.iso.Digest(c)
		if prev != res.sum {
			differed++
			bySource[src]++
			r.f.o.metrics.Failed(peer.KindChunk)
			r.avoid[src] = time.Now().Add(r.f.o.avoidFor)
			if err := r.iso.WriteChunk(c, res.data, res.sum); err != nil {
				return false, err
			}
			// The origin's bytes are kept in place of the peer's.
			r.fromPeers -= n
			r.fromOrigin += n
		} else {
			matched++
		}
		r.putBuf(res.data)
		delete(r.weak, c)
	}
	r.f.log.Warn("compared the unvouched chunks with the origin's", "differed", differed, "matched", matched,
		"origin_bytes", originBytes, "bad_by_peer", bySource)
	r.report()
	hashed := make(chan error, 1)
	r.hashInOrder(ctx, nil, hashed, nil)
	if err := <-hashed; err != nil {
		if errors.Is(err, peer.ErrVerification) {
			r.f.o.metrics.Verified(peer.VerifiedMismatch)
		}
		r.resetAll()
		return false, fmt.Errorf("ISO %.16s still does not match its sha512 after repair from the origin: %w", r.req.SHA512, err)
	}
	return false, nil
}

// recheck checks every unvouched chunk against what the other holders advertise now. A chunk a
// majority confirms stays unvouched (the origin is the last word if the sha512 still fails); one
// whose majority digest differs is dropped, to be fetched again, and its source avoided.
func (r *run) recheck(ctx context.Context) (confirmed, bad int, bySource map[string]int) {
	bySource = map[string]int{}
	for c, src := range r.weak {
		want, ok := r.vouch(ctx, c, src)
		if !ok {
			continue
		}
		have := r.iso.Digest(c)
		if bytes.Equal(want, have[:]) {
			confirmed++
			continue
		}
		bad++
		bySource[src]++
		r.f.o.metrics.Failed(peer.KindChunk)
		r.avoid[src] = time.Now().Add(r.f.o.avoidFor)
		r.fromPeers -= r.iso.ChunkLen(c)
		r.iso.DropChunk(c)
		delete(r.weak, c)
	}
	if bad > 0 {
		_ = r.iso.SaveState() // a restart must not take the dropped chunks for held
	}
	return confirmed, bad, bySource
}

// resetAll removes the partial download, whose bytes cannot be made to match the sha512 it is
// named by, so that the next Fetch starts over.
func (r *run) resetAll() {
	if err := r.f.store.Remove(r.req.SHA512, true); err != nil {
		r.f.log.Warn("remove the download that does not match its sha512", "err", err)
	}
}
