// Package policy decides whether an upgrade from one Harvester version to another is allowed, the
// way kubeadm does: every check either passes or fails, and a failing check is either required
// (the upgrade is refused) or skippable (force turns it into a warning). The package is pure: the
// caller gathers the facts (versions, nodes, plans) and Evaluate judges them.
//
// Imports: the standard library only (internal/boundary).
package policy
