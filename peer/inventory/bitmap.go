package inventory

// Bitmap marks which chunks are held, one bit a chunk, chunk 0 in the low bit of byte 0.
type Bitmap []byte

// NewBitmap returns an empty bitmap for n chunks.
func NewBitmap(n int) Bitmap { return make(Bitmap, bitmapLen(n)) }

func bitmapLen(n int) int { return (n + 7) / 8 }

// Has reports whether chunk c is marked.
func (b Bitmap) Has(c int) bool {
	return c >= 0 && c/8 < len(b) && b[c/8]&(1<<(c%8)) != 0
}

// Set marks chunk c.
func (b Bitmap) Set(c int) {
	if c >= 0 && c/8 < len(b) {
		b[c/8] |= 1 << (c % 8)
	}
}

// Clear unmarks chunk c.
func (b Bitmap) Clear(c int) {
	if c >= 0 && c/8 < len(b) {
		b[c/8] &^= 1 << (c % 8)
	}
}

// Count returns how many chunks are marked.
func (b Bitmap) Count() int {
	n := 0
	for _, x := range b {
		for ; x != 0; x &= x - 1 {
			n++
		}
	}
	return n
}

// Clone returns a copy of b (nil for nil).
func (b Bitmap) Clone() Bitmap {
	if b == nil {
		return nil
	}
	return append(Bitmap(nil), b...)
}
