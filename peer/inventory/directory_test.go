package inventory

import (
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func isoDigest(i int) string {
	s := sha512.Sum512([]byte(fmt.Sprint("iso", i)))
	return hex.EncodeToString(s[:])
}

func TestDeltasAreBatchedAndBounded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		isos    int
		limit   int
		maxMsgs int
	}{
		{name: "one ISO", isos: 1, limit: 1200, maxMsgs: 1},
		{name: "sixty ISOs", isos: 60, limit: 1200, maxMsgs: 60 / 15},
		{name: "small packets", isos: 20, limit: 200, maxMsgs: 20 / 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			src, dst := NewDirectory("a"), NewDirectory("b")
			for i := range tc.isos {
				require.NoError(t, src.SetISO(ISO{SHA512: isoDigest(i), Size: 100, ChunkSize: 10, Complete: true}))
			}
			msgs := src.TakeDeltas(tc.limit)
			require.NotEmpty(t, msgs)
			require.LessOrEqual(t, len(msgs), tc.maxMsgs, "changes must be batched, not one message a digest")
			for _, m := range msgs {
				require.LessOrEqual(t, len(m), tc.limit)
				changed, err := dst.ApplyDelta(m)
				require.NoError(t, err)
				require.True(t, changed)
			}
			require.Empty(t, src.TakeDeltas(tc.limit), "deltas are taken once")
			require.Equal(t, src.Snapshot()["a"], dst.Snapshot()["a"])
		})
	}
}

func TestDirectoryConverges(t *testing.T) {
	t.Parallel()
	a, b := NewDirectory("a"), NewDirectory("b")
	bm := NewBitmap(10)
	bm.Set(3)
	bm.Set(9)
	require.NoError(t, a.SetISO(ISO{SHA512: isoDigest(1), Size: 10 << 20, ChunkSize: 1 << 20, Chunks: bm}))
	require.NoError(t, a.SetISO(ISO{SHA512: isoDigest(2), Size: 100, ChunkSize: 10, Complete: true}))
	require.NoError(t, b.MergeState(a.LocalState()))
	require.Equal(t, a.Snapshot()["a"], b.Snapshot()["a"])

	holders := b.ISOHolders(isoDigest(1))
	require.Len(t, holders, 1)
	require.True(t, holders[0].ISO.Has(3))
	require.False(t, holders[0].ISO.Has(4))

	// A removal travels as a delta; an old full state does not bring the ISO back.
	old := a.LocalState()
	a.TakeDeltas(1200)
	a.RemoveISO(isoDigest(2))
	for _, m := range a.TakeDeltas(1200) {
		_, err := b.ApplyDelta(m)
		require.NoError(t, err)
	}
	require.Empty(t, b.ISOHolders(isoDigest(2)))
	require.NoError(t, b.MergeState(old))
	require.Empty(t, b.ISOHolders(isoDigest(2)), "an older state must not resurrect a removed ISO")

	// Completing the ISO replaces the chunk map.
	require.NoError(t, a.SetISO(ISO{SHA512: isoDigest(1), Size: 10 << 20, ChunkSize: 1 << 20, Complete: true}))
	require.NoError(t, b.MergeState(a.LocalState()))
	require.True(t, b.ISOHolders(isoDigest(1))[0].ISO.Complete)

	b.Forget("a")
	require.Empty(t, b.ISOHolders(isoDigest(1)))
}

func TestDirectoryRejectsBadInput(t *testing.T) {
	t.Parallel()
	good := func() []byte {
		d := NewDirectory("a")
		require.NoError(t, d.SetISO(ISO{SHA512: isoDigest(1), Size: 100, ChunkSize: 10, Chunks: NewBitmap(10)}))
		return d.LocalState()
	}()
	tests := []struct {
		name string
		buf  []byte
	}{
		{name: "empty", buf: nil},
		{name: "bad magic", buf: append([]byte("XX"), good[2:]...)},
		{name: "truncated", buf: good[:len(good)-3]},
		{name: "trailing bytes", buf: append(append([]byte(nil), good...), 0)},
		{name: "huge count", buf: []byte{'U', 'R', 1, 1, 1, 'a', 1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f}},
		{name: "unknown tag", buf: []byte{'U', 'R', 1, 1, 1, 'a', 1, 1, 1, 9, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := NewDirectory("b")
			require.ErrorIs(t, d.MergeState(tc.buf), ErrWire)
			_, err := d.ApplyDelta(tc.buf)
			require.ErrorIs(t, err, ErrWire)
			require.Equal(t, 0, d.Len())
		})
	}
	d := NewDirectory("b")
	require.Error(t, d.SetISO(ISO{SHA512: "abc", Size: 1, ChunkSize: 1}))
	require.Equal(t, 0, d.Len())
}

func FuzzDecode(f *testing.F) {
	d := NewDirectory("a")
	require.NoError(f, d.SetISO(ISO{SHA512: isoDigest(1), Size: 100, ChunkSize: 10, Chunks: NewBitmap(10)}))
	f.Add(d.LocalState())
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMessage(b)
		if err != nil {
			return
		}
		enc, _ := encodeMessage(m, 0)
		m2, err := decodeMessage(enc[0])
		require.NoError(t, err)
		require.Equal(t, m, m2)
	})
}

func TestDeltaSubject(t *testing.T) {
	t.Parallel()
	one := NewDirectory("a")
	require.NoError(t, one.SetISO(ISO{SHA512: isoDigest(1), Size: 10 << 20, ChunkSize: 1 << 20, Chunks: NewBitmap(10)}))
	oneISO := one.TakeDeltas(1200)
	require.NoError(t, one.SetISO(ISO{SHA512: isoDigest(2), Size: 10 << 20, ChunkSize: 1 << 20, Chunks: NewBitmap(10)}))
	require.NoError(t, one.SetISO(ISO{SHA512: isoDigest(3), Size: 10 << 20, ChunkSize: 1 << 20, Chunks: NewBitmap(10)}))
	twoISOs := one.TakeDeltas(1200)
	tests := []struct {
		name string
		buf  []byte
		want string
		ok   bool
	}{
		{name: "one ISO", buf: oneISO[0], want: "a\x00i" + isoDigest(1), ok: true},
		{name: "two ISOs", buf: twoISOs[0]},
		{name: "full state", buf: one.LocalState()},
		{name: "garbage", buf: []byte("UR\x01\x02junk")},
		{name: "empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := DeltaSubject(tc.buf)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, got)
		})
	}
}

// Agents of earlier versions advertised image blobs (tag 1, a 32-byte digest): a directory reads
// past them and keeps the ISOs of the same message, so that a ring upgraded one agent at a time
// goes on sharing the ISO.
func TestDirectoryIgnoresBlobEntries(t *testing.T) {
	t.Parallel()
	a := NewDirectory("a")
	require.NoError(t, a.SetISO(ISO{SHA512: isoDigest(1), Size: 100, ChunkSize: 10, Complete: true}))
	state := a.LocalState()
	// Header: magic, format, kind, name, epoch, version, count (1): append a blob entry after
	// the ISO's and count two.
	msg, err := decodeMessage(state)
	require.NoError(t, err)
	require.Len(t, msg.entries, 1)
	blob := append([]byte{tagBlob | tagPresent, 1}, make([]byte, 32)...)
	withBlob := appendHeader(nil, msg, 2)
	withBlob = append(withBlob, blob...)
	withBlob = appendEntry(withBlob, msg.entries[0])
	b := NewDirectory("b")
	require.NoError(t, b.MergeState(withBlob))
	require.Len(t, b.ISOHolders(isoDigest(1)), 1)
	require.Equal(t, 1, b.Len())
}
