package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
	"github.com/upgrade-repo/upgrade-repo/planview"
	"github.com/upgrade-repo/upgrade-repo/policy"
)

// planVersion is one Version of the cluster as `plan` lists them.
type planVersion struct {
	Name string `json:"name"`
	// Allowed says whether the policies let the cluster upgrade to it now.
	Allowed bool `json:"allowed"`
	// Failed names the policies that refuse it.
	Failed []string `json:"failed"`
	// Reachable is the Version's URLReachable condition: True, False or "" before the check.
	Reachable string `json:"reachable"`
	// Installed is true for the version the cluster runs.
	Installed bool `json:"installed"`
}

// planVersions judges every Version of the cluster with the policies plan applies to one (o
// without its target) and writes them, newest first: the ones the cluster can upgrade to, and
// why not for the others.
func planVersions(ctx context.Context, w io.Writer, c client.Reader, o planOptions, hc *http.Client) ([]planVersion, error) {
	var list v1beta1.VersionList
	if err := c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list versions: %w", err)
	}
	out := make([]planVersion, 0, len(list.Items))
	for _, v := range list.Items {
		po := o
		po.to, po.release = v.Name, ""
		rep, err := makePlan(ctx, po, c, hc)
		if err != nil {
			return nil, fmt.Errorf("judge version %s: %w", v.Name, err)
		}
		pv := planVersion{Name: v.Name, Allowed: rep.Allowed, Failed: []string{}, Installed: v.Name == rep.Current}
		for _, ch := range rep.Checks {
			if ch.Result == "fail" {
				pv.Failed = append(pv.Failed, ch.Name)
			}
		}
		if cond := meta.FindStatusCondition(v.Status.Conditions, v1beta1.VersionURLReachable); cond != nil {
			pv.Reachable = string(cond.Status)
		}
		out = append(out, pv)
	}
	// Newest first; names that are no version last, by name.
	slices.SortFunc(out, func(a, b planVersion) int {
		av, aerr := policy.ParseVersion(a.Name)
		bv, berr := policy.ParseVersion(b.Name)
		switch {
		case aerr == nil && berr == nil && av.Compare(bv) != 0:
			return -av.Compare(bv)
		case (aerr == nil) != (berr == nil):
			if aerr == nil {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	if w == nil {
		return out, nil
	}
	tw := planview.NewTable(w)
	fmt.Fprintln(tw, "VERSION\tUPGRADE\tURL\tREFUSED BY")
	for _, v := range out {
		verdict := "allowed"
		switch {
		case v.Installed:
			verdict = "installed"
		case !v.Allowed:
			verdict = "refused"
		}
		reach := map[string]string{"True": "reachable", "False": "unreachable"}[v.Reachable]
		if reach == "" {
			reach = "not checked"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Name, verdict, reach, planListOrDash(v.Failed))
	}
	if len(out) == 0 {
		fmt.Fprintln(tw, "(no Version in the cluster)\t\t\t")
	}
	return out, tw.Flush()
}

func planListOrDash(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ", ")
}
