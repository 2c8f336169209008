package inventory

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/upgrade-repo/upgrade-repo/chunks"
)

// The wire format of directory messages, compact so that many changes fit one UDP packet:
//
//	magic 'U' 'R', format 1, kind (1 state, 2 delta)
//	uvarint len + member name, uvarint epoch, uvarint version, uvarint entry count
//	each entry: tag (2 ISO) | present<<7, uvarint version, then
//	  ISO:  64 digest bytes; when present: uvarint size, uvarint chunk size, complete byte,
//	        and when not complete: uvarint length + chunk bitmap
const (
	kindState = 1
	kindDelta = 2

	// tagBlob entries (32 digest bytes) came from agents that advertised image blobs; they
	// are read and ignored, so that a ring upgraded one agent at a time keeps working.
	tagBlob    = 1
	tagISO     = 2
	tagPresent = 0x80

	maxNameLen = 256
)

// MaxChunks bounds the chunks of an ISO that can be shared: the chunk bitmap a message may carry
// (a 1 TiB ISO in 4 MiB chunks).
const MaxChunks = 1 << 18

// ErrWire is returned for a malformed directory message.
var ErrWire = errors.New("malformed directory message")

func errWire(what string) error { return fmt.Errorf("%w: %s", ErrWire, what) }

type message struct {
	kind    byte
	member  string
	epoch   uint64
	version uint64
	entries []entry
}

func appendHeader(b []byte, m message, count int) []byte {
	b = append(b, 'U', 'R', 1, m.kind)
	b = binary.AppendUvarint(b, uint64(len(m.member)))
	b = append(b, m.member...)
	b = binary.AppendUvarint(b, m.epoch)
	b = binary.AppendUvarint(b, m.version)
	return binary.AppendUvarint(b, uint64(count))
}

func appendEntry(b []byte, e entry) []byte {
	tag := byte(tagISO)
	if e.present {
		tag |= tagPresent
	}
	b = append(b, tag)
	b = binary.AppendUvarint(b, e.ver)
	raw, _ := hex.DecodeString(e.iso.SHA512)
	b = append(b, raw...)
	if !e.present {
		return b
	}
	b = binary.AppendUvarint(b, uint64(e.iso.Size))
	b = binary.AppendUvarint(b, uint64(e.iso.ChunkSize))
	if e.iso.Complete {
		return append(b, 1)
	}
	b = append(b, 0)
	b = binary.AppendUvarint(b, uint64(len(e.iso.Chunks)))
	return append(b, e.iso.Chunks...)
}

// encodeMessage encodes m. With limit 0 it returns one message; otherwise it splits the entries
// over as many messages of at most limit bytes as needed, and reports how many entries did not
// fit even alone.
func encodeMessage(m message, limit int) ([][]byte, int) {
	if limit <= 0 {
		b := appendHeader(nil, m, len(m.entries))
		for _, e := range m.entries {
			b = appendEntry(b, e)
		}
		return [][]byte{b}, 0
	}
	// The count is a uvarint: reserve its largest size for a packet's worth of entries.
	hdr := len(appendHeader(nil, m, 1<<14))
	var out [][]byte
	dropped := 0
	var batch []byte
	n := 0
	flush := func() {
		if n == 0 {
			return
		}
		out = append(out, append(appendHeader(nil, m, n), batch...))
		batch, n = nil, 0
	}
	for _, e := range m.entries {
		enc := appendEntry(nil, e)
		if hdr+len(enc) > limit {
			dropped++
			continue
		}
		if hdr+len(batch)+len(enc) > limit {
			flush()
		}
		batch = append(batch, enc...)
		n++
	}
	flush()
	return out, dropped
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = errWire(what)
	}
}

func (r *reader) byte(what string) byte {
	if r.err != nil || len(r.b) < 1 {
		r.fail("truncated " + what)
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad " + what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes(n uint64, what string) []byte {
	if r.err != nil {
		return nil
	}
	if uint64(len(r.b)) < n {
		r.fail("truncated " + what)
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// decodeMessage decodes and validates one message; it never panics and allocates in proportion
// to the input only.
func decodeMessage(buf []byte) (message, error) {
	r := &reader{b: buf}
	var m message
	if magic := r.bytes(3, "header"); r.err == nil && (magic[0] != 'U' || magic[1] != 'R' || magic[2] != 1) {
		return m, errWire("unknown header")
	}
	m.kind = r.byte("kind")
	if r.err == nil && m.kind != kindState && m.kind != kindDelta {
		return m, errWire(fmt.Sprintf("unknown kind %d", m.kind))
	}
	nameLen := r.uvarint("name length")
	if nameLen == 0 || nameLen > maxNameLen {
		r.fail(fmt.Sprintf("member name length %d", nameLen))
	}
	m.member = string(r.bytes(nameLen, "member name"))
	m.epoch = r.uvarint("epoch")
	m.version = r.uvarint("version")
	count := r.uvarint("entry count")
	// Every entry takes at least 34 bytes: a count beyond that is a lie.
	if count > uint64(len(r.b))/34+1 {
		r.fail(fmt.Sprintf("entry count %d for %d bytes", count, len(r.b)))
	}
	if r.err != nil {
		return message{}, r.err
	}
	m.entries = make([]entry, 0, count)
	for i := uint64(0); i < count && r.err == nil; i++ {
		var e entry
		tag := r.byte("entry tag")
		e.present = tag&tagPresent != 0
		e.ver = r.uvarint("entry version")
		switch tag &^ tagPresent {
		case tagBlob:
			r.bytes(32, "blob digest")
			continue
		case tagISO:
			if raw := r.bytes(64, "ISO digest"); r.err == nil {
				e.iso.SHA512 = hex.EncodeToString(raw)
			}
			if !e.present {
				break
			}
			size := r.uvarint("ISO size")
			chunk := r.uvarint("chunk size")
			if r.err == nil && (size == 0 || size > 1<<50 || chunk == 0 || chunk > 1<<40) {
				r.fail(fmt.Sprintf("ISO size %d, chunk size %d", size, chunk))
			}
			if r.err == nil && chunks.Count(int64(size), int64(chunk)) > MaxChunks {
				r.fail(fmt.Sprintf("ISO of %d chunks", chunks.Count(int64(size), int64(chunk))))
			}
			e.iso.Size, e.iso.ChunkSize = int64(size), int64(chunk)
			switch complete := r.byte("complete flag"); {
			case r.err != nil:
			case complete == 1:
				e.iso.Complete = true
			case complete == 0:
				n := r.uvarint("bitmap length")
				if r.err == nil && n != uint64(bitmapLen(e.iso.NumChunks())) {
					r.fail(fmt.Sprintf("bitmap of %d bytes for %d chunks", n, e.iso.NumChunks()))
				}
				e.iso.Chunks = Bitmap(append([]byte(nil), r.bytes(n, "bitmap")...))
			default:
				r.fail(fmt.Sprintf("complete flag %d", complete))
			}
		default:
			r.fail(fmt.Sprintf("entry tag %d", tag))
		}
		m.entries = append(m.entries, e)
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail(fmt.Sprintf("%d trailing bytes", len(r.b)))
	}
	if r.err != nil {
		return message{}, r.err
	}
	return m, nil
}
