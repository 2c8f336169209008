package v1beta1

// Finished reports whether p is final: Succeeded or Failed.
func (p Phase) Finished() bool {
	return p == PhaseSucceeded || p == PhaseFailed
}

// Name names p for people: the phase itself, "not started" for the empty phase of a plan the
// sequencer has not seen yet.
func (p Phase) Name() string {
	if p == "" {
		return "not started"
	}
	return string(p)
}

// NodeExecutor is how the plan upgrades its nodes: spec.nodeUpgradeOption.executor, Job when
// unset.
func (p *UpgradePlan) NodeExecutor() Executor {
	if o := p.Spec.NodeUpgradeOption; o != nil && o.Executor != "" {
		return o.Executor
	}
	return ExecutorJob
}
