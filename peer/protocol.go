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
// sha256 of each chunk it holds. peer/serve writes it, peer/fetch reads it to vouch for chunks.
type ChunkList struct {
	// Size is the ISO's size in bytes.
	Size int64 `json:"size"`
	// ChunkSize is the chunk size.
	ChunkSize int64 `json:"chunkSize"`
	// Complete is true when the holder verified the whole ISO.
	Complete bool `json:"complete"`
	// Digests holds the hex sha256 of each chunk, "" for chunks not held.
	Digests []string `json:"digests"`
}
