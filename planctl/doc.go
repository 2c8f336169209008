// Package planctl carries out what an operator asks of an upgrade from outside the cluster, the
// library side of `upgrade-repo upgrade`: the Version and the UpgradePlan that apply creates
// from a release ISO's URL and checksum (the checksum may come from the `.sha512` file beside the
// ISO), the drains a dry run previews, pause and resume through the plan's
// spec.nodeUpgradeOption.pauseNodes, retry through v1beta1.RetryAnnotation, and abort, the plan's
// deletion, with what it leaves behind.
//
// Every function that talks to the cluster takes a controller-runtime client and does what it
// says with the API server, nothing else: it never waits for the sequencer. The commands print
// and ask; this package decides what to write.
//
// Imports: api/v1beta1, peer (the one ISO checksum parser), redact, sequencer (the node order,
// what a control-plane node is) and sequencer/suc (the names of system-upgrade-controller's
// Plans); never the commands.
package planctl
