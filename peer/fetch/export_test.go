package fetch

// Owner returns the participant among names that fetches chunk c from the origin, for tests that
// count what a node should take from the origin.
func Owner(c int, names []string) string { return owner(c, names) }
