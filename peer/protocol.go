package peer

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// tokenLabel is what the token is the HMAC of: a fixed label, so that the gossip key itself
// never travels and a token does not serve for anything else.
const tokenLabel = "upgrade-repo peer v1"

// Token returns the bearer token of a ring whose members share secret (the gossip key):
// hex(HMAC-SHA256(secret, "upgrade-repo peer v1")), or "" for an empty secret. Peers send it
// (peer/fetch) and ask for it (peer/serve) to prove membership of the ring.
func Token(secret []byte) string {
	if len(secret) == 0 {
		return ""
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(tokenLabel))
	return hex.EncodeToString(m.Sum(nil))
}

// ChunkList is the body of GET /v1/iso/{sha512}/chunks: what a holder has of an ISO, with the
// digest of each chunk it holds (chunks.Sum, BLAKE3). peer/serve writes it, peer/fetch reads it
// to vouch for chunks.
//
// The digests travel under the name of their hash: a peer of an earlier version, which sent and
// read sha256 digests under "digests", finds none in this list and none of its own is read here,
// so neither vouches for nor against the other's chunks (they are taken as weakly verified, and
// the sha512 of the whole ISO decides).
type ChunkList struct {
	// Size is the ISO's size in bytes.
	Size int64 `json:"size"`
	// ChunkSize is the chunk size.
	ChunkSize int64 `json:"chunkSize"`
	// Complete is true when the holder verified the whole ISO.
	Complete bool `json:"complete"`
	// Digests holds the hex digest of each chunk, "" for chunks not held.
	Digests []string `json:"blake3"`
}
