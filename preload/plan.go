package preload

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/upgrade-repo/upgrade-repo/release"
)

// Action is what a plan does with one archive.
type Action string

// The actions of a plan.
const (
	// ActionSkip leaves an archive alone: every image it lists is present, or it lists none.
	ActionSkip Action = "skip"
	// ActionImport streams an archive into the store: at least one image it lists is missing.
	ActionImport Action = "import"
)

// ArchiveImages is one archive of the release's bundle with the references its list names.
type ArchiveImages struct {
	release.Archive
	// Images are the archive's listed references, normalised, in list order.
	Images []string `json:"images"`
}

// Step is the plan for one archive.
type Step struct {
	ArchiveImages
	// Missing are the listed images the store lacks when the plan is made.
	Missing []string `json:"missing,omitempty"`
	// Replace are the images of Missing the store holds under their name as another image than
	// the release's: the import points the name to the release's.
	Replace []Mismatch `json:"replace,omitempty"`
	// Action is what the preload does with the archive.
	Action Action `json:"action"`
	// Reason says why, for people.
	Reason string `json:"reason"`
}

// Plan is what a preload would do, one step per archive in bundle order.
type Plan struct {
	Steps []Step `json:"steps"`
}

// Imports returns the steps that import an archive.
func (p *Plan) Imports() []Step {
	var out []Step
	for _, s := range p.Steps {
		if s.Action == ActionImport {
			out = append(out, s)
		}
	}
	return out
}

// WriteRows writes p for people as the rows of a table, the header then a step a row, each
// cell followed by a tab: the caller lays them out (a text/tabwriter it flushes).
func (p *Plan) WriteRows(w io.Writer) {
	fmt.Fprintln(w, "ACTION\tGROUP\tARCHIVE\tREASON")
	for _, s := range p.Steps {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", s.Action, s.Group, s.Name(), s.Reason)
	}
}

// LoadArchives reads the bundle index and every image list of the release in fsys. An archive
// listed more than once is returned once, in the place of its first mention, with the images of
// all its lists: importing it again would only repeat the work (a bundle listing one archive
// thousands of times would otherwise import it thousands of times).
func LoadArchives(fsys fs.FS) ([]ArchiveImages, error) {
	b, err := release.LoadBundle(fsys)
	if err != nil {
		return nil, fmt.Errorf("load bundle: %w", err)
	}
	out := make([]ArchiveImages, 0, len(b.Archives))
	at := map[string]int{}              // archive path → index in out
	refsAt := map[int]map[string]bool{} // index in out → its images, once merged
	read := map[[2]string]bool{}        // (list, archive) pairs already read
	for _, a := range b.Archives {
		key := [2]string{a.List, a.Archive}
		if read[key] {
			continue
		}
		read[key] = true
		refs, err := release.LoadImageList(fsys, a)
		if err != nil {
			return nil, fmt.Errorf("load image list of %s: %w", a.Name(), err)
		}
		i, seen := at[a.Archive]
		if !seen {
			at[a.Archive] = len(out)
			out = append(out, ArchiveImages{Archive: a, Images: refs})
			continue
		}
		if refsAt[i] == nil {
			refsAt[i] = map[string]bool{}
			for _, ref := range out[i].Images {
				refsAt[i][ref] = true
			}
		}
		for _, ref := range refs {
			if !refsAt[i][ref] {
				refsAt[i][ref] = true
				out[i].Images = append(out[i].Images, ref)
			}
		}
	}
	return out, nil
}

// MakePlan decides, for each archive, whether to import it: an archive is skipped when the store
// holds every image its list names (or the list names none) and imported otherwise. It asks p
// once for all listed images and changes nothing. It judges images by name; a Preloader's Plan
// also compares the digests of the images the store holds with the release's.
func MakePlan(ctx context.Context, p Presence, archives []ArchiveImages) (*Plan, error) {
	return makePlan(ctx, func(ctx context.Context, refs []string) ([]string, []Mismatch, error) {
		missing, err := p.Missing(ctx, refs)
		return missing, nil, err
	}, archives)
}

// checkFunc returns the references of refs the store lacks and, among them, those it holds as
// another image than the release's.
type checkFunc func(ctx context.Context, refs []string) ([]string, []Mismatch, error)

// makePlan is MakePlan over check.
func makePlan(ctx context.Context, check checkFunc, archives []ArchiveImages) (*Plan, error) {
	var all []string
	for _, a := range archives {
		all = append(all, a.Images...)
	}
	missing := map[string]bool{}
	replace := map[string]Mismatch{}
	if len(all) > 0 {
		m, r, err := check(ctx, all)
		if err != nil {
			return nil, fmt.Errorf("check present images: %w", err)
		}
		for _, ref := range m {
			missing[ref] = true
		}
		for _, x := range r {
			replace[x.Ref] = x
		}
	}
	plan := &Plan{Steps: make([]Step, 0, len(archives))}
	for _, a := range archives {
		s := Step{ArchiveImages: a}
		var held []string
		for _, ref := range a.Images {
			if missing[ref] {
				s.Missing = append(s.Missing, ref)
			}
			if x, ok := replace[ref]; ok {
				s.Replace = append(s.Replace, x)
				held = append(held, x.String())
			}
		}
		switch {
		case len(a.Images) == 0:
			s.Action, s.Reason = ActionSkip, "the image list names no image"
		case len(s.Missing) == 0:
			s.Action, s.Reason = ActionSkip, fmt.Sprintf("all %d listed images are present", len(a.Images))
		default:
			s.Action = ActionImport
			s.Reason = fmt.Sprintf("%d of %d listed images are missing: %s",
				len(s.Missing), len(a.Images), summarize(s.Missing, 3))
			if len(held) > 0 {
				s.Reason += fmt.Sprintf("; held as another image than the release's: %s", summarize(held, 3))
			}
		}
		plan.Steps = append(plan.Steps, s)
	}
	return plan, nil
}

// summarize joins the first n references and counts the rest.
func summarize(refs []string, n int) string {
	if len(refs) <= n {
		return strings.Join(refs, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(refs[:n], ", "), len(refs)-n)
}
