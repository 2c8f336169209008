package preload_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/upgrade-repo/upgrade-repo/preload"
	"github.com/upgrade-repo/upgrade-repo/preload/preloadtest"
	"github.com/upgrade-repo/upgrade-repo/release"
)

func archive(name string, refs ...string) preload.ArchiveImages {
	return preload.ArchiveImages{
		Archive: release.Archive{Group: "common", List: "bundle/l/" + name + ".txt", Archive: "bundle/a/" + name + ".tar.zst"},
		Images:  refs,
	}
}

func TestMakePlan(t *testing.T) {
	t.Parallel()
	const a, b, c, d, e = "docker.io/library/a:1", "docker.io/library/b:1", "docker.io/library/c:1", "docker.io/library/d:1", "docker.io/library/e:1"
	tests := []struct {
		name     string
		present  []string
		archives []preload.ArchiveImages
		actions  []preload.Action
		missing  [][]string
		reasons  []string
	}{
		{
			name:     "nothing present imports everything",
			archives: []preload.ArchiveImages{archive("x", a, b), archive("y", c)},
			actions:  []preload.Action{preload.ActionImport, preload.ActionImport},
			missing:  [][]string{{a, b}, {c}},
			reasons:  []string{"2 of 2 listed images are missing: " + a + ", " + b, "1 of 1 listed images are missing: " + c},
		},
		{
			name:     "a fully present archive is skipped",
			present:  []string{a, b},
			archives: []preload.ArchiveImages{archive("x", a, b), archive("y", c)},
			actions:  []preload.Action{preload.ActionSkip, preload.ActionImport},
			missing:  [][]string{nil, {c}},
			reasons:  []string{"all 2 listed images are present", "1 of 1 listed images are missing: " + c},
		},
		{
			name:     "one missing image imports the whole archive",
			present:  []string{a, c, d},
			archives: []preload.ArchiveImages{archive("x", a, b, c, d, e)},
			actions:  []preload.Action{preload.ActionImport},
			missing:  [][]string{{b, e}},
			reasons:  []string{"2 of 5 listed images are missing: " + b + ", " + e},
		},
		{
			name:     "long lists are summarized",
			archives: []preload.ArchiveImages{archive("x", a, b, c, d, e)},
			actions:  []preload.Action{preload.ActionImport},
			missing:  [][]string{{a, b, c, d, e}},
			reasons:  []string{"5 of 5 listed images are missing: " + a + ", " + b + ", " + c + " and 2 more"},
		},
		{
			name:     "an empty list is skipped",
			archives: []preload.ArchiveImages{archive("x")},
			actions:  []preload.Action{preload.ActionSkip},
			missing:  [][]string{nil},
			reasons:  []string{"the image list names no image"},
		},
		{
			name: "no archives, empty plan",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			plan, err := preload.MakePlan(t.Context(), preloadtest.NewStore(tc.present...), tc.archives)
			require.NoError(t, err)
			require.Len(t, plan.Steps, len(tc.archives))
			for i, s := range plan.Steps {
				require.Equal(t, tc.archives[i], s.ArchiveImages)
				require.Equal(t, tc.actions[i], s.Action, s.Name())
				require.Equal(t, tc.missing[i], s.Missing, s.Name())
				require.Equal(t, tc.reasons[i], s.Reason, s.Name())
			}
		})
	}
}

func TestMakePlanStoreError(t *testing.T) {
	t.Parallel()
	s := preloadtest.NewStore()
	s.MissingErr = errors.New("connection refused")
	_, err := preload.MakePlan(t.Context(), s, []preload.ArchiveImages{archive("x", "docker.io/library/a:1")})
	require.ErrorContains(t, err, "check present images: connection refused")
}

func TestPlanWriteRows(t *testing.T) {
	t.Parallel()
	step := func(group, archive string, a preload.Action, reason string) preload.Step {
		return preload.Step{ArchiveImages: preload.ArchiveImages{Archive: release.Archive{Group: group, Archive: archive}}, Action: a, Reason: reason}
	}
	tests := []struct {
		name string
		plan preload.Plan
		want string
	}{
		{name: "no step", want: "ACTION\tGROUP\tARCHIVE\tREASON\n"},
		{
			name: "a step an archive, by its file name",
			plan: preload.Plan{Steps: []preload.Step{
				step("common", "bundle/common/images/a.tar.zst", preload.ActionSkip, "all 2 listed images present"),
				step("rke2", "bundle/rke2/images/b.tar.zst", preload.ActionImport, "1 of 3 listed images missing"),
			}},
			want: "ACTION\tGROUP\tARCHIVE\tREASON\n" +
				"skip\tcommon\ta.tar.zst\tall 2 listed images present\n" +
				"import\trke2\tb.tar.zst\t1 of 3 listed images missing\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var b bytes.Buffer
			tt.plan.WriteRows(&b)
			require.Equal(t, tt.want, b.String())
		})
	}
}

func TestStatusSummary(t *testing.T) {
	t.Parallel()
	st := preload.Status{State: preload.StatePreloaded, ImagesPresent: 7, ImagesTotal: 7, BytesRead: 1234}
	require.Equal(t, "ImagePreloaded: 7 of 7 images present, 1234 bytes read in 2.5s", st.Summary(2500*time.Millisecond))
}
