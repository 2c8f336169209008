// Package agent is the per-node daemon of upgrade-repo: what every node of the cluster runs.
//
// An Agent gets the release ISO onto its node, serves it, shares it with the other agents,
// preloads the release's images into the node's containerd and reports all of it to the
// sequencer. New takes its Config and its dependencies (the listener, the gossip member, the
// image store, the cluster client), all built by the command; Run runs it until its context ends.
//
// The path of the release through one agent:
//
//	origin URL ─┐   peers' chunks (peer.Fetcher, verified against the sha512 and the other holders)
//	            ▼
//	   ISO acquisition ──► node cache <sha512>.iso ──► repo server (repo.Handler over iso.Open)
//	            │                                        │  /, /harvester-iso/, /v1/release, ...
//	            ▼                                        ▼
//	   gossip directory (peer.Directory: chunks held) ──► other agents fetch /v1/iso/{sha512}
//	            │
//	            ▼
//	   preload (preload.Preloader: archives from the local ISO into containerd, once allowed)
//	            │
//	            ▼
//	   RepoNode report (sequencer/report.Writer: ISO, repo, preload state and progress)
//
// Its parts, each in a file of its own:
//
//   - the status board (Board): the node's state, served as /v1/status and mapped to the
//     RepoNode's status;
//   - plan following (instructions): a watch on the UpgradePlans, turned into what they ask of
//     this node (report.Decide), which the other parts wait on;
//   - holding the ISO (hold.go): a given ISO is held for good; an ISO a plan names is acquired,
//     served, preloaded once the plan lists the node, and dropped from the cache once no plan holds
//     it;
//   - the release's image digests (digests.go): read from the verified ISO's archives beside the
//     preload, kept in the cache, served at /v1/images/digests/{sha512} for the sequencer to record
//     on the Version, and the mirror's pins (mirror.go): a tag is served only as what the
//     release's archive says it is;
//   - the node step's reports (step.go): POST /v1/step from the upgrade image's node Job, put on
//     the board and written into the RepoNode's status.step;
//   - the report loop (reporter): the RepoNode written at once on a change of state, and as a
//     heartbeat.
//
// The agent decides; it owns no technology. It must not import containerd or memberlist (their
// adapters, preload/containerd and peer/memberlist, are built by the command and handed in behind
// preload.Store and the Gossip interface), nor the commands.
//
// Imports: api, sequencer/report (the plans' instructions), peer, peer/inventory, peer/cache,
// peer/fetch, peer/serve, chunks, checksum, iso, isorelease and httprange (a judged release's
// ranges, forecast.go), forecast (which archives are counted blob by blob), isorepo, repo,
// registry, release, preload, nodestep (the step's reports), backoff, idle, printable and
// redact; never its adapters (preload/containerd, peer/memberlist), which are handed in, nor
// the sequencer.
package agent
