package pack

import (
	"context"
	"fmt"
	"io"
	"os"
)

// BuildTo writes the release of spec as `upgrade-repo release pack` does: into the directory
// tree when it is not empty (created when missing), then turned into the ISO out too when out is
// not empty (MakeISO); without a tree, straight into the ISO out (Build).
func BuildTo(ctx context.Context, spec Spec, out, tree string) (*Result, error) {
	if tree == "" {
		return Build(ctx, spec, out)
	}
	if err := os.MkdirAll(tree, 0o755); err != nil {
		return nil, err
	}
	res, err := BuildTree(ctx, spec, tree)
	if err != nil {
		return nil, err
	}
	if out != "" {
		if err := MakeISO(ctx, tree, out, spec.VolumeIDOrDefault()); err != nil {
			return nil, err
		}
		res.VolumeID = spec.VolumeIDOrDefault()
	}
	return res, nil
}

// Write says, for people, what was written to where: each archive with its size and images,
// then the totals.
func (r *Result) Write(w io.Writer, where string) {
	n := 0
	for _, ar := range r.Archives {
		n += len(ar.Images)
		fmt.Fprintf(w, "%-7s %s (%d bytes, %d images)\n", ar.Group, ar.Archive, ar.Size, len(ar.Images))
	}
	fmt.Fprintf(w, "wrote %s: release %s, %d archives, %d images, %d files\n", where, r.Version, len(r.Archives), n, len(r.Files))
}
