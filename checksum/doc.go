// Package checksum is the one reading of a release ISO's checksum: its SHA-512, as a Version, an
// UpgradePlan, a flag or a checksum file beside the ISO writes it.
//
// Every part that takes a checksum (the CLI, the agent, the fetcher, the gossip directory, the
// sequencer) parses it with Parse, and the Version CRD validates isoChecksum with Pattern, the
// same grammar: a checksum one part accepts, every part accepts. ParseFile reads the checksum
// file published beside an ISO, in sha512sum's form or BSD's.
//
// SHA256 is the other digest a release uses: the one its SHA256SUMS gives for each Kubernetes
// binary (ParseSHA256List), read with the same rules. Digests are compared as these types, never
// as strings, so that "sha512:HEX", "HEX" and upper-case HEX are the same checksum everywhere.
// Digest is either of the two, as an operator gives the digest of a whole image to check it.
//
// Imports: the standard library only.
package checksum
