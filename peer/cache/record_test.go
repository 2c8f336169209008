package cache_test

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/chunks"
	"github.com/upgrade-repo/upgrade-repo/peer/cache"
	"github.com/upgrade-repo/upgrade-repo/peer/inventory"
)

// record is the JSON kept beside a partial download or a verified ISO, as this test writes it.
type record struct {
	SHA512    string        `json:"sha512"`
	Size      int64         `json:"size"`
	ChunkSize int64         `json:"chunkSize"`
	Digest    string        `json:"digest,omitempty"`
	Digests   []string      `json:"digests"`
	Verified  *chunks.Stamp `json:"verified,omitempty"`
}

func writeRecord(t *testing.T, p string, r record) {
	t.Helper()
	b, err := json.Marshal(r)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, b, 0o644))
}

func readRecord(t *testing.T, p string) record {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	var r record
	require.NoError(t, json.Unmarshal(b, &r))
	return r
}

func TestOpenPartialResumesFromItsRecord(t *testing.T) {
	const chunk, n = 1 << 20, 4
	blake := func(b []byte) string { d := chunks.Sum(b); return hex.EncodeToString(d[:]) }
	sha := func(b []byte) string { d := sha256.Sum256(b); return hex.EncodeToString(d[:]) }
	tests := []struct {
		name     string
		digest   string              // the hash the record names
		hash     func([]byte) string // how the record's digests were computed
		spoil    int                 // a chunk whose recorded digest is wrong, -1 for none
		wantHeld []int
	}{
		{name: "a record of this version", digest: chunks.Algorithm, hash: blake, spoil: -1, wantHeld: []int{0, 2}},
		{name: "a record of an earlier version: sha256, no hash named", digest: "", hash: sha, spoil: -1, wantHeld: []int{0, 2}},
		{name: "an earlier record with a chunk that changed", digest: "", hash: sha, spoil: 2, wantHeld: []int{0}},
		{name: "digests of this hash under an earlier record's name are not taken", digest: "", hash: blake, spoil: -1},
		{name: "a hash this version does not know", digest: "md5", hash: blake, spoil: -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := make([]byte, n*chunk-100)
			for i := range data {
				data[i] = byte(i*13 + i>>12)
			}
			whole := sha512.Sum512(data)
			sum := hex.EncodeToString(whole[:])
			path := filepath.Join(t.TempDir(), sum+".iso")
			// A partial download that held chunks 0 and 2 when it stopped.
			partial := make([]byte, len(data))
			digests := make([]string, n)
			for _, c := range []int{0, 2} {
				b := data[c*chunk : (c+1)*chunk]
				copy(partial[c*chunk:], b)
				digests[c] = tc.hash(b)
			}
			if tc.spoil >= 0 {
				partial[tc.spoil*chunk+7] ^= 1
			}
			require.NoError(t, os.WriteFile(path+".partial", partial, 0o644))
			writeRecord(t, path+".partial.json", record{SHA512: sum, Size: int64(len(data)), ChunkSize: chunk, Digest: tc.digest, Digests: digests})

			store := cache.NewStore(inventory.NewDirectory("self"))
			l, err := store.OpenPartial(path, sum, int64(len(data)), chunk)
			require.NoError(t, err)
			defer l.Close()
			var held []int
			for c := range n {
				if l.Has(c) {
					held = append(held, c)
					require.Equal(t, chunks.Sum(data[c*chunk:(c+1)*chunk]), l.Digest(c), "chunk %d is known by this version's digest", c)
				}
			}
			require.Equal(t, tc.wantHeld, held)

			// Recorded anew, under this version's hash.
			require.NoError(t, l.SaveState())
			r := readRecord(t, path+".partial.json")
			require.Equal(t, chunks.Algorithm, r.Digest)
			for c := range n {
				want := ""
				if l.Has(c) {
					want = blake(data[c*chunk : (c+1)*chunk])
				}
				require.Equal(t, want, r.Digests[c], "chunk %d", c)
			}
		})
	}
}

func TestOpenCachedHashesAnISORecordedWithAnotherHash(t *testing.T) {
	const chunk = 1 << 20
	data := make([]byte, 3*chunk+5)
	for i := range data {
		data[i] = byte(i * 31)
	}
	whole := sha512.Sum512(data)
	sum := hex.EncodeToString(whole[:])
	path := filepath.Join(t.TempDir(), sum+".iso")
	require.NoError(t, os.WriteFile(path, data, 0o644))

	store := cache.NewStore(inventory.NewDirectory("self"))
	l, reused, err := store.OpenCached(path, sum, chunk)
	require.NoError(t, err)
	require.False(t, reused, "hashed the first time")
	require.NoError(t, l.Close())
	r := readRecord(t, path+".json")
	require.Equal(t, chunks.Algorithm, r.Digest)
	require.NotNil(t, r.Verified)

	store = cache.NewStore(inventory.NewDirectory("self"))
	l, reused, err = store.OpenCached(path, sum, chunk)
	require.NoError(t, err)
	require.True(t, reused, "unchanged and recorded: not hashed again")
	require.NoError(t, l.Close())

	// The same record as an earlier version wrote it: sha256 digests, no hash named.
	r.Digest = ""
	for c := range r.Digests {
		d := sha256.Sum256(data[c*chunk : min(len(data), (c+1)*chunk)])
		r.Digests[c] = hex.EncodeToString(d[:])
	}
	writeRecord(t, path+".json", r)
	store = cache.NewStore(inventory.NewDirectory("self"))
	l, reused, err = store.OpenCached(path, sum, chunk)
	require.NoError(t, err)
	require.False(t, reused, "an earlier version's record: hashed again")
	defer l.Close()
	require.Equal(t, chunks.Sum(data[chunk:2*chunk]), l.Digest(1))
	require.Equal(t, chunks.Algorithm, readRecord(t, path+".json").Digest, "recorded anew")
}

// Chunks written in quick succession are recorded once 16 MiB of them are left out of the record
// (or a second after it was written), and all of them once the download's Flush runs; a closed
// download is not recorded again.
func TestWriteChunkRecordsEvery16MiB(t *testing.T) {
	tests := []struct {
		name     string
		chunk    int
		wantHeld []int // recorded after chunks 0, 1 and 2 were written
	}{
		{name: "small chunks: the first recorded, the next two not yet", chunk: 1 << 20, wantHeld: []int{0}},
		{name: "16 MiB left out: recorded", chunk: 8 << 20, wantHeld: []int{0, 1, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			chunk, n := tc.chunk, 4
			data := make([]byte, n*chunk)
			for i := range data {
				data[i] = byte(i * 3)
			}
			whole := sha512.Sum512(data)
			sum := hex.EncodeToString(whole[:])
			path := filepath.Join(t.TempDir(), sum+".iso")
			l, err := cache.NewStore(inventory.NewDirectory("self")).OpenPartial(path, sum, int64(len(data)), int64(chunk))
			require.NoError(t, err)
			held := func() []int {
				var out []int
				for c, d := range readRecord(t, path+".partial.json").Digests {
					if d != "" {
						out = append(out, c)
					}
				}
				return out
			}
			write := func(c int) {
				b := data[c*chunk : (c+1)*chunk]
				require.NoError(t, l.WriteChunk(c, b, chunks.Sum(b)))
			}
			for c := range 3 {
				write(c)
			}
			require.Equal(t, tc.wantHeld, held())
			require.NoError(t, l.Flush())
			require.Equal(t, []int{0, 1, 2}, held())

			write(3)
			require.NoError(t, l.Close())
			require.NoError(t, l.Flush())
			require.Equal(t, []int{0, 1, 2}, held(), "nothing recorded after Close")
		})
	}
}

// Whatever the record beside a partial download holds, OpenPartial neither fails nor panics, and
// holds only chunks whose bytes match the digest it keeps for them.
func FuzzOpenPartialRecord(f *testing.F) {
	const chunk, n = 4096, 4
	data := make([]byte, n*chunk-7)
	for i := range data {
		data[i] = byte(i * 7)
	}
	whole := sha512.Sum512(data)
	sum := hex.EncodeToString(whole[:])
	digests := make([]string, n)
	for c := range n {
		d := chunks.Sum(data[c*chunk : min(len(data), (c+1)*chunk)])
		digests[c] = hex.EncodeToString(d[:])
	}
	for _, r := range []record{
		{SHA512: sum, Size: int64(len(data)), ChunkSize: chunk, Digest: chunks.Algorithm, Digests: digests},
		{SHA512: sum, Size: int64(len(data)), ChunkSize: chunk, Digests: digests},
		{SHA512: sum, Size: int64(len(data)), ChunkSize: chunk, Digest: "md5", Digests: []string{"", "zz", digests[2]}},
	} {
		b, err := json.Marshal(r)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, rec []byte) {
		path := filepath.Join(t.TempDir(), sum+".iso")
		require.NoError(t, os.WriteFile(path+".partial", data, 0o644))
		require.NoError(t, os.WriteFile(path+".partial.json", rec, 0o644))
		l, err := cache.NewStore(inventory.NewDirectory("self")).OpenPartial(path, sum, int64(len(data)), chunk)
		require.NoError(t, err)
		defer l.Close()
		for c := range n {
			if l.Has(c) {
				require.Equal(t, chunks.Sum(data[c*chunk:min(len(data), (c+1)*chunk)]), l.Digest(c), "chunk %d", c)
			}
		}
	})
}
