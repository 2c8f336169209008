// Package forecast answers, before and while an upgrade runs, the two questions an operator asks
// of it: will every node have room (Disk), and when will it end (Time). Both are pure functions
// of figures the caller gathered: what the release holds (read from its ISO through ranges),
// what each node reports of its file systems and its kubelet's image garbage collection, what
// earlier plans of the cluster took, and the rates measured while this plan runs.
//
// Imports: the standard library only.
package forecast
