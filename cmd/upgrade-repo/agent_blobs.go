package main

import (
	"context"
	"sync"

	"github.com/upgrade-repo/upgrade-repo/chunks"
	"github.com/upgrade-repo/upgrade-repo/peer"
)

// sharedBlobs are the blobs an agent serves and advertises to its peers: those of the images the
// release's image lists name, as containerd holds them after the preload; never the rest of the
// content store (the layers of private images pulled with pull secrets).
type sharedBlobs struct {
	listed *peer.ListedBlobs

	mu   sync.Mutex
	refs []string
}

// shareReleaseBlobs makes the blobs of the images refs (the release's listed images) the blobs
// this node serves and advertises; nil refs withdraws them all.
func (n *agentNode) shareReleaseBlobs(ctx context.Context, refs []string) {
	if n.shared == nil {
		return
	}
	n.shared.mu.Lock()
	n.shared.refs = refs
	n.shared.mu.Unlock()
	n.advertiseOnce(ctx)
}

// advertiseOnce lists the blobs of the shared images that containerd holds now (the garbage
// collector may have removed some, a preload added others), serves those and publishes them in the
// directory, withdrawing what is no longer listed.
func (n *agentNode) advertiseOnce(ctx context.Context) {
	if n.shared == nil {
		return
	}
	n.shared.mu.Lock()
	refs := n.shared.refs
	n.shared.mu.Unlock()
	var digests []string
	if len(refs) > 0 {
		var err error
		if digests, err = n.cs.ImageBlobs(ctx, refs); err != nil {
			if ctx.Err() == nil {
				n.a.log.Warn("list the release's blobs for peers", "err", err)
			}
			return
		}
	}
	n.dir.RemoveBlobs(n.shared.listed.Set(digests)...)
	if err := n.dir.AddBlobs(digests...); err != nil {
		n.a.log.Warn("publish the release's blobs", "err", err)
	}
}

// verifier returns the chunk check of the held ISO with the given sha512, or nil.
func (n *agentNode) verifier(sha512 string) *chunks.Verifier {
	if l, ok := n.store.ISO(sha512); ok {
		return l.Verifier()
	}
	return nil
}

// damaged reports an ISO found damaged on disk while it is served: the damaged chunk is refused
// and withdrawn from what peers are told (see peer.Store); the node reports the ISO as failed,
// naming the chunk, until a restart verifies the file again and fetches it anew.
func (n *agentNode) damaged(sha512 string, d *chunks.DamageError) {
	n.board.update(func(s *agentStatus) {
		if s.ISO.SHA512 != sha512 {
			return
		}
		s.ISO.State = "failed"
		s.ISO.Verified = false
		s.Error = "the cached ISO is damaged on disk, restart the agent to fetch it again: " + d.Error()
	})
}
