// Package idle abandons an HTTP exchange that goes quiet without failing: a connection that
// stays open and sends nothing (a stalled origin, a peer frozen mid-transfer, a middlebox that
// drops a flow without a reset) would otherwise hold a download for as long as TCP keeps it.
//
// A Watchdog cancels its request's context when the exchange has been waiting longer than its
// timeout: for the answer's headers, or inside one read of the body. The time the reader spends
// between reads (writing what it read to disk, importing it) is not counted, so a slow consumer
// is never mistaken for a stalled server. The fetcher of package peer and the preload's HTTP
// source both use it.
//
// Imports: the standard library only.
package idle
