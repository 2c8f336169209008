package cache

import (
	"errors"
	"fmt"
	"os"

	"github.com/upgrade-repo/upgrade-repo/peer"
)

// Remove withdraws the ISO with the given sha512 from the directory, stops serving it to peers and
// closes its file. With deleteFile it also deletes the file (and a partial download's state), for
// an ISO in a cache the caller owns. It returns an error wrapping peer.ErrNotFound when the store does
// not hold the ISO. Peers reading the ISO at that moment get an error and turn to other holders.
func (s *Store) Remove(sha512 string, deleteFile bool) error {
	s.mu.Lock()
	l, ok := s.isos[sha512]
	delete(s.isos, sha512)
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("remove ISO %.16s: %w", sha512, peer.ErrNotFound)
	}
	s.dir.RemoveISO(sha512)
	path := l.Path()
	err := l.Close()
	if deleteFile {
		for _, p := range []string{path, path + ".json"} {
			if rerr := os.Remove(p); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = errors.Join(err, rerr)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("remove ISO %.16s: %w", sha512, err)
	}
	return nil
}
