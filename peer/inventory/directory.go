package inventory

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/upgrade-repo/upgrade-repo/checksum"
	"github.com/upgrade-repo/upgrade-repo/chunks"
)

// ISO is what one member holds of one release ISO.
type ISO struct {
	// SHA512 is the lower-case hex sha512 of the whole ISO.
	SHA512 string
	// Size is the size of the ISO in bytes.
	Size int64
	// ChunkSize is the size of every chunk but the last.
	ChunkSize int64
	// Complete is true once the holder has the whole ISO and verified its sha512.
	Complete bool
	// Chunks marks the chunks held while downloading; it is nil when Complete.
	Chunks Bitmap
}

// NumChunks returns how many chunks the ISO has.
func (i ISO) NumChunks() int { return chunks.Count(i.Size, i.ChunkSize) }

// Has reports whether the holder has chunk c.
func (i ISO) Has(c int) bool {
	if c < 0 || c >= i.NumChunks() {
		return false
	}
	return i.Complete || i.Chunks.Has(c)
}

// Holding is one member's holding of an ISO.
type Holding struct {
	// Member is the holder's name.
	Member string
	// ISO is what it holds.
	ISO ISO
}

// Inventory is everything one member holds, as the directory knows it.
type Inventory struct {
	// ISOs lists the ISOs, sorted by SHA512.
	ISOs []ISO
}

// Directory records who holds what: the local node's inventory, which it publishes, and every
// other member's, learnt from gossip. All methods are safe for concurrent use and never block on
// the network.
type Directory struct {
	self  string
	epoch uint64

	mu      sync.Mutex
	version uint64
	local   map[string]entry // key → entry
	pending map[string]struct{}
	remote  map[string]*remoteInventory
	gone    map[string]*remoteInventory
	changed chan struct{}
	queued  chan struct{}
}

// entry is one item of an inventory: an ISO, present or deleted, with the version of its owner's
// counter at which it last changed.
type entry struct {
	ver     uint64
	present bool
	iso     ISO // SHA512 always set
}

func (e entry) key() string { return "i" + e.iso.SHA512 }

type remoteInventory struct {
	epoch   uint64
	base    uint64 // version of the last full state merged
	full    bool   // a full state was merged: the entries are the whole inventory
	entries map[string]entry
}

// NewDirectory returns an empty directory for the local node named self.
func NewDirectory(self string) *Directory {
	return &Directory{
		self:    self,
		epoch:   uint64(time.Now().UnixNano()),
		local:   map[string]entry{},
		pending: map[string]struct{}{},
		remote:  map[string]*remoteInventory{},
		gone:    map[string]*remoteInventory{},
		changed: make(chan struct{}),
		queued:  make(chan struct{}, 1),
	}
}

// Self returns the name of the local node.
func (d *Directory) Self() string { return d.self }

// Changed returns a channel closed at the next change of any inventory, local or remote.
func (d *Directory) Changed() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.changed
}

// Pending returns a channel that receives a value when local changes wait to be broadcast
// (see TakeDeltas).
func (d *Directory) Pending() <-chan struct{} { return d.queued }

// notifyLocked wakes the waiters of Changed. d.mu must be held.
func (d *Directory) notifyLocked() {
	close(d.changed)
	d.changed = make(chan struct{})
}

func (d *Directory) setLocal(e entry) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := e.key()
	if old, ok := d.local[k]; ok && old.present == e.present && equalISO(old.iso, e.iso) {
		return
	}
	if _, ok := d.local[k]; !ok && !e.present {
		return
	}
	d.version++
	e.ver = d.version
	d.local[k] = e
	d.pending[k] = struct{}{}
	d.notifyLocked()
	select {
	case d.queued <- struct{}{}:
	default:
	}
}

func equalISO(a, b ISO) bool {
	if a.SHA512 != b.SHA512 || a.Size != b.Size || a.ChunkSize != b.ChunkSize || a.Complete != b.Complete {
		return false
	}
	return string(a.Chunks) == string(b.Chunks)
}

// SetISO publishes what the local node holds of an ISO. It returns an error, and publishes
// nothing, when the ISO is not well formed.
func (d *Directory) SetISO(iso ISO) error {
	if !isDigest(iso.SHA512) || iso.Size <= 0 || iso.ChunkSize <= 0 ||
		chunks.Count(iso.Size, iso.ChunkSize) > MaxChunks ||
		!iso.Complete && len(iso.Chunks) != bitmapLen(iso.NumChunks()) {
		return fmt.Errorf("publish ISO %.16s: size %d, chunk size %d, %d bitmap bytes: not well formed",
			iso.SHA512, iso.Size, iso.ChunkSize, len(iso.Chunks))
	}
	if iso.Complete {
		iso.Chunks = nil
	} else {
		iso.Chunks = iso.Chunks.Clone()
	}
	d.setLocal(entry{present: true, iso: iso})
	return nil
}

// isDigest reports whether s is a sha512 in the form the directory keeps: 128 lower-case hex
// digits, nothing else.
func isDigest(s string) bool { return checksum.IsHex(s) }

// RemoveISO withdraws an ISO from the local inventory.
func (d *Directory) RemoveISO(sha512 string) {
	d.setLocal(entry{iso: ISO{SHA512: sha512}})
}

// Forget sets aside what the directory knows of a member that left the ring. A member declared
// dead by mistake (a loaded node) comes back with Restore, or by sending news, without waiting for
// a full exchange of state.
func (d *Directory) Forget(member string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if inv, ok := d.remote[member]; ok {
		delete(d.remote, member)
		d.gone[member] = inv
		d.notifyLocked()
	}
}

// Restore brings back what was set aside by Forget when the member rejoins.
func (d *Directory) Restore(member string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if inv, ok := d.gone[member]; ok {
		delete(d.gone, member)
		if _, live := d.remote[member]; !live {
			d.remote[member] = inv
			d.notifyLocked()
		}
	}
}

// ISOHolders returns the members other than the local node that hold at least one chunk of the
// ISO, sorted by member name.
func (d *Directory) ISOHolders(sha512 string) []Holding {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Holding
	k := "i" + sha512
	for name, inv := range d.remote {
		if e, ok := inv.entries[k]; ok && e.present {
			iso := e.iso
			iso.Chunks = iso.Chunks.Clone()
			out = append(out, Holding{Member: name, ISO: iso})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Member < out[j].Member })
	return out
}

// Knows reports whether the directory holds a full inventory of member, received in a push/pull
// exchange: until then, what it says member holds may be only the deltas it happened to hear.
func (d *Directory) Knows(member string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	inv, ok := d.remote[member]
	return ok && inv.full
}

// Len returns the number of ISOs the directory knows, over all members.
func (d *Directory) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, e := range d.local {
		if e.present {
			n++
		}
	}
	for _, inv := range d.remote {
		for _, e := range inv.entries {
			if e.present {
				n++
			}
		}
	}
	return n
}

// Snapshot returns every member's inventory, the local node's included, keyed by member name.
func (d *Directory) Snapshot() map[string]Inventory {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]Inventory{d.self: toInventory(d.local)}
	for name, inv := range d.remote {
		out[name] = toInventory(inv.entries)
	}
	return out
}

func toInventory(entries map[string]entry) Inventory {
	var inv Inventory
	for _, e := range entries {
		if !e.present {
			continue
		}
		iso := e.iso
		iso.Chunks = iso.Chunks.Clone()
		inv.ISOs = append(inv.ISOs, iso)
	}
	sort.Slice(inv.ISOs, func(i, j int) bool { return inv.ISOs[i].SHA512 < inv.ISOs[j].SHA512 })
	return inv
}

// LocalState encodes the whole local inventory, for the gossip layer's push/pull exchange.
func (d *Directory) LocalState() []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	entries := make([]entry, 0, len(d.local))
	for _, e := range d.local {
		if e.present {
			entries = append(entries, e)
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].key() < entries[j].key() })
	b, _ := encodeMessage(message{kind: kindState, member: d.self, epoch: d.epoch, version: d.version, entries: entries}, 0)
	return b[0]
}

// MergeState merges a full inventory received from another member. It returns an error, and
// changes nothing, when buf is malformed.
func (d *Directory) MergeState(buf []byte) error {
	m, err := decodeMessage(buf)
	if err != nil {
		return err
	}
	if m.kind != kindState {
		return errWire("a delta where a full state was expected")
	}
	if m.member == d.self {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	inv := d.remoteLocked(m.member, m.epoch)
	if inv == nil {
		return nil
	}
	seen := make(map[string]struct{}, len(m.entries))
	changed := false
	for _, e := range m.entries {
		k := e.key()
		seen[k] = struct{}{}
		if old, ok := inv.entries[k]; !ok || e.ver > old.ver {
			inv.entries[k] = e
			changed = true
		}
	}
	for k, e := range inv.entries {
		if _, ok := seen[k]; !ok && e.ver <= m.version {
			delete(inv.entries, k)
			changed = changed || e.present
		}
	}
	if m.version > inv.base {
		inv.base = m.version
	}
	inv.full = true
	if changed {
		d.notifyLocked()
	}
	return nil
}

// remoteLocked returns the inventory of member for a message of the given epoch, resetting it
// when the member restarted, or nil when the message comes from an older incarnation.
func (d *Directory) remoteLocked(member string, epoch uint64) *remoteInventory {
	if inv, ok := d.gone[member]; ok {
		delete(d.gone, member)
		d.remote[member] = inv
	}
	inv, ok := d.remote[member]
	if ok && epoch < inv.epoch {
		return nil
	}
	if !ok || epoch > inv.epoch {
		inv = &remoteInventory{epoch: epoch, entries: map[string]entry{}}
		d.remote[member] = inv
	}
	return inv
}

// TakeDeltas encodes the local changes made since the last call into messages of at most limit
// bytes each, batching as many changes as fit in each, and forgets them.
func (d *Directory) TakeDeltas(limit int) [][]byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.pending) == 0 {
		return nil
	}
	entries := make([]entry, 0, len(d.pending))
	for k := range d.pending {
		entries = append(entries, d.local[k])
	}
	d.pending = map[string]struct{}{}
	sort.Slice(entries, func(i, j int) bool { return entries[i].ver < entries[j].ver })
	msgs, dropped := encodeMessage(message{kind: kindDelta, member: d.self, epoch: d.epoch, version: d.version, entries: entries}, limit)
	// An entry too large for one packet (the chunk map of a huge ISO) travels in push/pull only.
	_ = dropped
	return msgs
}

// DeltaSubject names the one item a delta carries, with its member, and reports false for a
// delta of several items or a malformed one. Every delta carries the whole current state of its
// items (an ISO's complete chunk bitmap, not the chunks added), so a gossip queue may let a newer
// delta of the same subject replace an older one still waiting to be sent.
func DeltaSubject(buf []byte) (string, bool) {
	m, err := decodeMessage(buf)
	if err != nil || m.kind != kindDelta || len(m.entries) != 1 {
		return "", false
	}
	return m.member + "\x00" + m.entries[0].key(), true
}

// ApplyDelta applies a delta received from the gossip layer. It reports whether anything
// changed, so that the caller can pass the delta on; it returns an error, and changes nothing,
// when buf is malformed.
func (d *Directory) ApplyDelta(buf []byte) (bool, error) {
	m, err := decodeMessage(buf)
	if err != nil {
		return false, err
	}
	if m.kind != kindDelta {
		return false, errWire("a full state where a delta was expected")
	}
	if m.member == d.self {
		return false, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	inv := d.remoteLocked(m.member, m.epoch)
	if inv == nil {
		return false, nil
	}
	changed := false
	for _, e := range m.entries {
		k := e.key()
		old, ok := inv.entries[k]
		if ok && e.ver <= old.ver || !ok && e.ver <= inv.base {
			continue
		}
		inv.entries[k] = e
		changed = true
	}
	if changed {
		d.notifyLocked()
	}
	return changed, nil
}
