package peer

import (
	"errors"
)

// Member is one live member of the gossip ring.
type Member struct {
	// Name is the member's unique node name.
	Name string
	// Addr is the host:port of the member's HTTP server, taken from its gossip metadata.
	Addr string
}

// Membership is the view of the gossip ring that the rest of the package needs.
//
// Members must be safe for concurrent use, must not block on the network and returns a fresh
// slice that the caller owns. The local node is included.
type Membership interface {
	// Members returns the live members, the local node included.
	Members() []Member
	// LocalName returns the name of the local node.
	LocalName() string
}

// StaticMembers is a fixed Membership, for a node without gossip and for tests of logic.
type StaticMembers struct {
	// Local is the local node's name.
	Local string
	// List holds every member, Local included.
	List []Member
}

var _ Membership = (*StaticMembers)(nil)

// Members returns a copy of List.
func (s *StaticMembers) Members() []Member { return append([]Member(nil), s.List...) }

// LocalName returns Local.
func (s *StaticMembers) LocalName() string { return s.Local }

// ErrNotFound is returned when the content asked for is not held.
var ErrNotFound = errors.New("content not found")

// ErrVerification is returned when bytes do not match the digest they should have.
var ErrVerification = errors.New("content failed verification")
