// Package planctl carries out what an operator asks of an upgrade from outside the cluster, the
// library side of `upgrade-repo upgrade`: the Version and the UpgradePlan that apply creates
// from a release ISO's URL and checksum (the checksum may come from the `.sha512` file beside the
// ISO), the drains a dry run previews, pause and resume through the plan's
// spec.nodeUpgradeOption.pauseNodes, retry through v1beta1.RetryAnnotation, skip through
// spec.nodeUpgradeOption.skipNodes, the plan that upgrades one node alone
// (spec.nodeUpgradeOption.nodes), and abort, the plan's deletion, with what it leaves behind.
//
// Every function that talks to the cluster takes a controller-runtime client and does what it
// says with the API server, nothing else: it never waits for the sequencer. Each change is
// idempotent: made twice, or once more after a write that landed but whose answer was lost, it
// leaves the same plan, and an update that meets a Conflict reads the plan again and applies the
// change again.
//
// Each verb of the commands has its function here, named after it (PlanVerb, ApplyVerb,
// PauseVerb, ResumeVerb, RetryVerb, AbortVerb, SkipVerb, NodeVerb, FinalizeVerb, RollbackVerb):
// it makes the change and writes to the writer it is given what it did and what follows, in the
// words the operator reads, and asks (Confirm) where the verb asks. The commands parse the flags,
// build the client and call it. Status, the verb of `upgrade status`, reads a plan and, asked to,
// watches it to its end, writing its view (planview) at each change.
//
// The commands hand these functions a RetryingClient, which rides out a restarting API server:
// Transient is the one rule of what is waited out (connection failures, 429, 5xx, etcd's leader
// changes), with backoff for a bounded time, and told once per outage. The planctltest package
// is an API server stand-in that goes away and comes back, for tests.
//
// Preview is what `upgrade-repo plan` and `upgrade apply` show before anything is created: the
// facts gathered from the cluster (or given), judged as the sequencer judges them, into the
// planview.Report that planview writes; Versions judges every Version of the cluster so.
//
// Imports: api/v1beta1, backoff (the one retry policy), checksum, forecast (byte counts for
// humans), httprange, isorelease, repoclient and release (the target's metadata, read from a
// file, a repo or an ISO's URL), planview (the reports it fills and the status it writes),
// policy, printable, redact, sequencer (the node order, what a control-plane node is, the
// judgement) and sequencer/suc (the names of system-upgrade-controller's Plans); never the
// commands.
package planctl
