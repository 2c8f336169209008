// Package isorepo opens a release ISO file as the repo's HTTP handler: the one place where package
// iso's reader meets package repo's server. The agent serves the ISO it holds with it, and
// "upgrade-repo serve" the ISO it is given.
//
// Imports: iso, repo, chunks, checksum and the standard library; never the agent, peer or the
// commands.
package isorepo
