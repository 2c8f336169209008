// Package sequencer drives UpgradePlans through their phases. Decide is a pure function from the
// plan, its Version and the observed nodes and agent reports to the next action; the Reconciler
// observes the cluster through controller-runtime, calls Decide and applies its action. Every
// action is idempotent and all progress lives in the plan's status, so a restarted sequencer
// resumes where the last one stopped. Metrics exposes the plans' phase, conditions and nodes by
// state to Prometheus, read from the cluster at each scrape.
//
// Imports: api, policy, forecast, release, repoclient, suc, isorelease, planview, nodestep (the step's
// environment), backoff, checksum, httprange, redact and controller-runtime; never the node's side
// (agent, peer, preload, iso, repo) nor containerd or memberlist.
package sequencer
