package policy

import (
	"fmt"
	"strings"
)

// Names of the checks, as they appear in Result.Checks; the Kubernetes version-skew checks
// (CheckKubernetesNoDowngrade, CheckKubernetesMinorStep, CheckKubeletSkew) follow them.
const (
	CheckTargetVersion        = "TargetVersion"
	CheckCurrentVersion       = "CurrentVersion"
	CheckVersionExists        = "VersionExists"
	CheckNoPlanInFlight       = "NoPlanInFlight"
	CheckMinUpgradableVersion = "MinUpgradableVersion"
	CheckMinorStep            = "MinorVersionStep"
	CheckNoDowngrade          = "NoDowngrade"
	CheckNodesReady           = "NodesReady"
	CheckPrerelease           = "Prerelease"
)

// Input holds the facts a decision is made on.
type Input struct {
	// Current is the installed version.
	Current string
	// Target is the version to upgrade to.
	Target string
	// MinUpgradableVersion is the target release's minUpgradableVersion; empty when it sets none.
	MinUpgradableVersion string
	// VersionExists is true when the target names an existing Version object. Set it to true
	// when there is no cluster to ask (the plan command offline).
	VersionExists bool
	// PlansInFlight names the other plans that are neither Succeeded nor Failed.
	PlansInFlight []string
	// NotReadyNodes names the nodes that are not Ready.
	NotReadyNodes []string
	// ReleaseUnknown is true when the target release's metadata has not been read yet, so
	// neither its minUpgradableVersion nor the one-minor-step rule can be judged; the check
	// passes with a message saying it was not made, and must be made again once it is known.
	ReleaseUnknown bool
	// Force turns the failures of skippable checks into warnings.
	Force bool
	// AllowPrerelease allows a pre-release target without Force.
	AllowPrerelease bool
	// KubernetesCurrent is the control plane's Kubernetes version (the API server's, or the
	// oldest kubelet of the control-plane nodes); empty when unknown, which skips the
	// Kubernetes version-skew checks.
	KubernetesCurrent string
	// KubernetesTarget is the target release's Kubernetes version; empty when the release names
	// none or is not known yet (ReleaseUnknown).
	KubernetesTarget string
	// Kubelets maps node names to the versions their kubelets report; an empty version is
	// unknown.
	Kubelets map[string]string
	// Rollback is true for the rollback of an upgrade (an UpgradePlan's spec.rollback, whose
	// record the sequencer checks): the rules against a downgrade, of the release and of its
	// Kubernetes version, pass for a downgrade within one minor version and fail, required,
	// across one; kubelets newer than the target are what the rollback replaces.
	Rollback bool
	// Preflight are the facts of the pre-flight checks (disk, cordons, budgets, certificates).
	Preflight Preflight
}

// Check is the outcome of one policy.
type Check struct {
	// Name identifies the policy (one of the Check* constants).
	Name string `json:"name"`
	// Description says what the policy requires.
	Description string `json:"description"`
	// Required is true when a failure refuses the upgrade even with force.
	Required bool `json:"required"`
	// Passed is true when the policy holds.
	Passed bool `json:"passed"`
	// Forced is true when the policy failed and force turned the failure into a warning.
	Forced bool `json:"forced,omitempty"`
	// Transient is true when the failure may clear by itself (a node turning Ready, another plan
	// finishing), so a controller should wait rather than give up.
	Transient bool `json:"transient,omitempty"`
	// Message explains the outcome.
	Message string `json:"message"`
}

// Blocking reports whether the check refuses the upgrade.
func (c Check) Blocking() bool { return !c.Passed && !c.Forced }

// Result is the outcome of every policy.
type Result struct {
	// Allowed is true when no check refuses the upgrade.
	Allowed bool `json:"allowed"`
	// Checks lists every policy in a fixed order.
	Checks []Check `json:"checks"`
}

// Failed returns the checks that refuse the upgrade.
func (r Result) Failed() []Check {
	var out []Check
	for _, c := range r.Checks {
		if c.Blocking() {
			out = append(out, c)
		}
	}
	return out
}

// Transient reports whether every check that refuses the upgrade may clear by itself.
func (r Result) Transient() bool {
	f := r.Failed()
	for _, c := range f {
		if !c.Transient {
			return false
		}
	}
	return len(f) > 0
}

// Summary joins the messages of the refusing checks, for an error or a condition message.
func (r Result) Summary() string {
	var parts []string
	for _, c := range r.Failed() {
		parts = append(parts, c.Name+": "+c.Message)
	}
	return strings.Join(parts, "; ")
}

// Evaluate judges in. It never fails: a version that does not parse is a failed check.
func Evaluate(in Input) Result {
	var checks []Check
	add := func(c Check) { checks = append(checks, c) }

	target, terr := ParseVersion(in.Target)
	add(result(Check{Name: CheckTargetVersion, Required: true, Description: "the target is a version"},
		terr == nil, fmt.Sprintf("target %s", in.Target), errMsg(terr)))

	current, cerr := ParseVersion(in.Current)
	if strings.TrimSpace(in.Current) == "" {
		cerr = fmt.Errorf("the installed version is unknown")
	}
	c := result(Check{Name: CheckCurrentVersion, Required: true, Description: "the installed version is known and is a version"},
		cerr == nil, fmt.Sprintf("installed %s", in.Current), errMsg(cerr))
	// An unknown installed version may become known (it is recorded by the sequencer or given by
	// the administrator), so the controller waits for it.
	c.Transient = strings.TrimSpace(in.Current) == ""
	add(c)

	add(result(Check{Name: CheckVersionExists, Required: true, Transient: true, Description: "the plan names an existing Version"},
		in.VersionExists, "the Version exists", fmt.Sprintf("no Version named %s", in.Target)))

	add(result(Check{Name: CheckNoPlanInFlight, Required: true, Transient: true, Description: "no other upgrade plan is in flight"},
		len(in.PlansInFlight) == 0, "no other plan in flight", "other plans in flight: "+strings.Join(in.PlansInFlight, ", ")))

	bothKnown := terr == nil && cerr == nil
	same := bothKnown && current.Compare(target) == 0

	switch {
	case in.ReleaseUnknown:
		add(Check{Name: CheckMinUpgradableVersion, Required: true, Passed: true,
			Description: "the installed version is at least the release's minUpgradableVersion",
			Message:     "not checked yet: the release metadata is not known"})
	case strings.TrimSpace(in.MinUpgradableVersion) != "":
		add(minUpgradable(in.MinUpgradableVersion, current, cerr, same))
	default:
		add(minorStep(current, target, bothKnown, same))
	}

	nd := Check{Name: CheckNoDowngrade, Description: "the target is not older than the installed version"}
	switch {
	case in.Rollback:
		nd = rollbackStep(nd, current, target, bothKnown)
	case !bothKnown:
		nd = result(nd, false, "", "cannot compare versions that are unknown or do not parse")
	default:
		nd = result(nd, current.Compare(target) <= 0,
			fmt.Sprintf("%s to %s is not a downgrade", current, target),
			fmt.Sprintf("%s is older than the installed %s", target, current))
	}
	add(force(nd, in.Force))

	add(force(result(Check{Name: CheckNodesReady, Transient: true, Description: "every node is Ready"},
		len(in.NotReadyNodes) == 0, "every node is Ready", "nodes not Ready: "+strings.Join(in.NotReadyNodes, ", ")), in.Force))

	pr := Check{Name: CheckPrerelease, Description: "a pre-release target only when allowed explicitly"}
	switch {
	case terr != nil:
		pr = result(pr, false, "", "the target does not parse")
	case !target.IsPrerelease():
		pr = result(pr, true, fmt.Sprintf("%s is a release", target), "")
	default:
		pr = result(pr, in.AllowPrerelease, fmt.Sprintf("%s is a pre-release and pre-releases are allowed", target),
			fmt.Sprintf("%s is a pre-release; allow pre-releases to install it", target))
	}
	add(force(pr, in.Force))

	for _, c := range kubernetesChecks(in) {
		add(c)
	}
	for _, c := range preflightChecks(in) {
		add(c)
	}

	if strings.TrimSpace(in.Current) == "" {
		// The checks that fail only because the installed version is unknown clear with it.
		for i := range checks {
			switch checks[i].Name {
			case CheckMinUpgradableVersion, CheckMinorStep, CheckNoDowngrade:
				checks[i].Transient = !checks[i].Passed
			}
		}
	}
	r := Result{Allowed: true, Checks: checks}
	for _, c := range checks {
		if c.Blocking() {
			r.Allowed = false
		}
	}
	return r
}

func minUpgradable(minStr string, current Version, cerr error, same bool) Check {
	c := Check{Name: CheckMinUpgradableVersion, Required: true,
		Description: "the installed version is at least the release's minUpgradableVersion"}
	minV, err := ParseVersion(minStr)
	switch {
	case err != nil:
		return result(c, false, "", "the release's minUpgradableVersion: "+err.Error())
	case cerr != nil:
		return result(c, false, "", "the installed version is unknown or does not parse")
	case same:
		return result(c, true, "re-applying the installed version", "")
	}
	// A pre-release of the minimum (v1.4.2-rc1) is older than the minimum itself.
	return result(c, current.Compare(minV) >= 0,
		fmt.Sprintf("installed %s is at least %s", current, minV),
		fmt.Sprintf("installed %s is older than the minimum %s this release upgrades from", current, minV))
}

func minorStep(current, target Version, bothKnown, same bool) Check {
	c := Check{Name: CheckMinorStep, Required: true,
		Description: "without a minUpgradableVersion, at most one minor version up"}
	switch {
	case !bothKnown:
		return result(c, false, "", "cannot compare versions that are unknown or do not parse")
	case same:
		return result(c, true, "re-applying the installed version", "")
	case target.Compare(current) < 0:
		// Going back is the downgrade policy's business.
		return result(c, true, "not an upgrade", "")
	case target.Major != current.Major:
		return result(c, false, "", fmt.Sprintf("%s to %s changes the major version and the release sets no minUpgradableVersion", current, target))
	}
	return result(c, target.Minor-current.Minor <= 1,
		fmt.Sprintf("%s to %s is at most one minor step", current, target),
		fmt.Sprintf("%s to %s skips %d minor versions", current, target, target.Minor-current.Minor-1))
}

func result(c Check, ok bool, pass, fail string) Check {
	c.Passed = ok
	if ok {
		c.Message = pass
	} else {
		c.Message = fail
	}
	return c
}

func force(c Check, f bool) Check {
	if !c.Passed && !c.Required && f {
		c.Forced = true
		c.Message += " (forced)"
	}
	return c
}

func errMsg(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
