// Package backoff is the one retry policy of the product: waits that double from Initial up to
// Max, each shortened by a random part (Jitter) so that many nodes failing together do not ask
// again together, and a streak of failures bounded in attempts, in time, or not at all.
//
// A Policy describes the waits; Start begins a streak (a *Backoff) for one operation, whose Wait
// records a failure and sleeps before the next attempt, and whose Reset records progress, after
// which the waits and the bounds start over. Retry runs a function under a policy until it
// succeeds, fails permanently (Permanent), or the policy gives up.
//
// Imports: the standard library only.
package backoff
