package main

import (
	"github.com/upgrade-repo/upgrade-repo/chunks"
)

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
