package isorelease

import (
	"bytes"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"
)

func TestZstdContentSize(t *testing.T) {
	t.Parallel()
	data := bytes.Repeat([]byte("layer "), 50_000)
	enc, err := zstd.NewWriter(nil)
	require.NoError(t, err)
	withSize := enc.EncodeAll(data, nil)
	var streamed bytes.Buffer
	w, err := zstd.NewWriter(&streamed)
	require.NoError(t, err)
	_, err = w.Write(data)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	tests := []struct {
		name string
		in   []byte
		want int64
	}{
		{name: "one frame compressed whole", in: withSize, want: int64(len(data))},
		{name: "a stream says nothing", in: streamed.Bytes(), want: 0},
		{name: "one-byte size, single segment", in: []byte{0x28, 0xb5, 0x2f, 0xfd, 0x20, 42}, want: 42},
		{name: "two-byte size is offset by 256", in: []byte{0x28, 0xb5, 0x2f, 0xfd, 0x60, 0x01, 0x00}, want: 257},
		{name: "not zstd", in: []byte("PK\x03\x04 a zip"), want: 0},
		{name: "truncated", in: []byte{0x28, 0xb5, 0x2f, 0xfd, 0xe0}, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, zstdContentSize(tt.in))
		})
	}
}
