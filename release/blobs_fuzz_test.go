package release_test

import (
	"strings"
	"testing"

	"github.com/upgrade-repo/upgrade-repo/release"
)

// FuzzParseBlobs: any bytes give an index or an error, never a panic; an index it accepts names
// only sha256 blobs with their sizes, none negative.
func FuzzParseBlobs(f *testing.F) {
	f.Add([]byte(`{"archives":[{"archive":"a.tar.zst","images":{"x:1":["sha256:aa"]}}],"sizes":{"sha256:aa":{"size":3,"unpacked":4}}}`))
	f.Add([]byte(`{"archives":[{"archive":"a","images":{"x":["md5:1"]}}],"sizes":{}}`))
	f.Add([]byte(`{"sizes":{"sha256:aa":{"size":-1}}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := release.ParseBlobs(data)
		if err != nil {
			return
		}
		for _, a := range b.Archives {
			for ref, digests := range a.Images {
				for _, d := range digests {
					s, ok := b.Sizes[d]
					if !ok || !strings.HasPrefix(d, "sha256:") || s.Size < 0 || s.Unpacked < 0 {
						t.Fatalf("accepted image %s blob %q with sizes %+v (present %t)", ref, d, s, ok)
					}
				}
			}
		}
	})
}
