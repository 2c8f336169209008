package sequencer

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/upgrade-repo/upgrade-repo/api/v1beta1"
)

func (d *decider) isoDownloading() {
	// A download in progress with a live agent is not a stall however long it takes; nodes whose
	// agent has not picked the ISO up are, after StallAfter.
	var waiting, failed []string
	idle := false
	for _, n := range d.o.Nodes {
		rn, why, ok := d.report(n.Name)
		switch {
		case !ok:
			waiting = append(waiting, n.Name+": "+why)
			idle = true
			if rn != nil && rn.HeartbeatTime.Time.Before(d.now.Add(-d.cfg.HeartbeatTimeout)) && d.cfg.HeartbeatTimeout > 0 {
				failed = append(failed, n.Name+": "+why)
			}
		case rn.ISO.State == v1beta1.ISOFailed:
			failed = append(failed, n.Name+": "+rn.ISO.Message)
		case rn.ISO.State != v1beta1.ISOReady:
			waiting = append(waiting, fmt.Sprintf("%s: %s %s", n.Name, rn.ISO.State, percent(rn.ISO.BytesDone, rn.ISO.BytesTotal)))
		}
		if rn != nil && ok {
			d.setNode(n.Name, func(s *v1beta1.NodeUpgradeStatus) {
				s.Message = fmt.Sprintf("ISO %s %s (%d bytes from peers, %d from origin)", rn.ISO.State,
					percent(rn.ISO.BytesDone, rn.ISO.BytesTotal), rn.ISO.BytesFromPeers, rn.ISO.BytesFromOrigin)
			})
		}
	}
	switch {
	case len(failed) > 0:
		d.wait("ISODownloadStalled", strings.Join(failed, "; "), 0, true)
	case len(waiting) > 0:
		stallAfter := time.Duration(0)
		if idle {
			stallAfter = d.cfg.StallAfter
		}
		d.wait("ISODownloading", "waiting for "+strings.Join(waiting, "; "), stallAfter, false)
	default:
		d.out.Actions = append(d.out.Actions, Action{Kind: ActionRecordDownloaded})
		d.enter(v1beta1.PhaseISODownloaded)
	}
}

func (d *decider) repoCreating() {
	var waiting []string
	for _, n := range d.o.Nodes {
		rn, why, ok := d.report(n.Name)
		switch {
		case !ok:
			waiting = append(waiting, n.Name+": "+why)
		case !rn.Repo.Ready:
			waiting = append(waiting, n.Name+": repo not Ready")
		}
	}
	if d.o.ReadyEndpoints == 0 {
		waiting = append(waiting, "the repo Service has no Ready endpoint")
	}
	if len(waiting) > 0 {
		d.wait("RepoNotReady", strings.Join(waiting, "; "), d.cfg.StallAfter, false)
		return
	}
	d.enter(v1beta1.PhaseRepoCreated)
}

func (d *decider) metadataPopulating() {
	if d.o.ReleaseErr != nil || d.o.Release == nil {
		msg := "the release metadata was not read"
		if d.o.ReleaseErr != nil {
			msg = d.o.ReleaseErr.Error()
		}
		d.wait("MetadataUnavailable", msg, d.cfg.StallAfter, false)
		return
	}
	r := d.o.Release
	if r.Harvester != d.o.Plan.Spec.Version {
		d.fail("ReleaseMismatch", fmt.Sprintf("the ISO holds release %s, the plan wants %s", r.Harvester, d.o.Plan.Spec.Version))
		return
	}
	if !d.judge(d.o.Release) {
		return
	}
	d.st.ReleaseMetadata = &v1beta1.ReleaseMetadata{
		Harvester: r.Harvester, HarvesterChart: r.HarvesterChart, OS: r.OS, Kubernetes: r.Kubernetes,
		Rancher: r.Rancher, MonitoringChart: r.MonitoringChart, LoggingChart: r.LoggingChart,
		Kubevirt: r.Kubevirt, MinUpgradableVersion: r.MinUpgradableVersion,
		Etcd: extraString(r, releaseEtcdKey), CoreDNS: extraString(r, releaseCoreDNSKey),
	}
	d.out.Actions = append(d.out.Actions, Action{Kind: ActionRecordImages})
	d.enter(v1beta1.PhaseMetadataPopulated)
}

func (d *decider) imagePreloading() {
	p := d.o.Plan
	conc := 0
	if p.Spec.ImagePreloadOption != nil {
		conc = p.Spec.ImagePreloadOption.Concurrency
	}
	if conc <= 0 {
		conc = len(d.o.Nodes)
	}
	allowed := map[string]bool{}
	for _, n := range d.st.Agents.PreloadNodes {
		allowed[n] = true
	}
	var pending, preloading []string
	active, done := 0, 0
	var stalled, silent []string
	for _, n := range orderedNames(d.o.Nodes) {
		rn, why, ok := d.report(n)
		state := v1beta1.NodeImagePreloadPending
		switch {
		case ok && rn.Preload.State == v1beta1.PreloadDone:
			state = v1beta1.NodeImagePreloaded
			done++
		case ok && rn.Preload.State == v1beta1.PreloadFailed:
			d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) {
				s.State, s.Reason, s.Message = v1beta1.NodeImagePreloadFailed, rn.Preload.Reason, rn.Preload.Message
			})
			d.fail("ImagePreloadFailed", fmt.Sprintf("node %s: %s %s", n, rn.Preload.Reason, rn.Preload.Message))
			return
		case allowed[n]:
			state = v1beta1.NodeImagePreloading
			active++
			preloading = append(preloading, n)
			switch {
			case !ok && rn != nil:
				stalled = append(stalled, n+": "+why)
			case !ok:
				silent = append(silent, n+": "+why)
			}
		default:
			pending = append(pending, n)
		}
		d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) {
			s.State, s.Reason, s.Message = state, "", ""
			if ok {
				s.ImagesDone, s.ImagesTotal = rn.Preload.ImagesDone, rn.Preload.ImagesTotal
				s.BytesDone, s.BytesTotal = rn.Preload.BytesDone, rn.Preload.BytesTotal
			}
		})
	}
	for _, n := range pending {
		if active >= conc {
			break
		}
		d.st.Agents.PreloadNodes = append(d.st.Agents.PreloadNodes, n)
		d.setNode(n, func(s *v1beta1.NodeUpgradeStatus) { s.State = v1beta1.NodeImagePreloading })
		active++
	}
	slices.Sort(d.st.Agents.PreloadNodes)
	if done == len(d.o.Nodes) {
		d.enter(v1beta1.PhaseImagePreloaded)
		return
	}
	if len(stalled) > 0 {
		d.wait("AgentNotReporting", strings.Join(stalled, "; "), 0, true)
		return
	}
	if len(silent) > 0 {
		// Agents that have not reported at all are given StallAfter to appear.
		d.wait("AgentNotReporting", strings.Join(silent, "; "), d.cfg.StallAfter, false)
		return
	}
	if st := d.stalledNodes(preloading); len(st) > 0 {
		d.wait("NodeStalled", strings.Join(st, "; "), 0, true)
		return
	}
	d.wait("ImagePreloading", fmt.Sprintf("%d of %d nodes preloaded", done, len(d.o.Nodes)), 0, false)
}

func (d *decider) clusterUpgrading() {
	j := d.o.ClusterJob
	switch {
	case !j.Exists:
		d.out.Actions = append(d.out.Actions, Action{Kind: ActionCreateClusterJob})
		d.wait("ClusterJobRunning", "the cluster Job was created", 0, false)
	case j.Failed:
		d.fail("ClusterJobFailed", j.Message)
	case j.Succeeded:
		d.enter(v1beta1.PhaseClusterUpgraded)
	case j.Stuck != "":
		d.wait("ClusterJobStuck", j.Stuck, 0, true)
	default:
		d.wait("ClusterJobRunning", "waiting for the cluster Job", d.cfg.StepStallAfter, false)
	}
}
