package policy

import "fmt"

// rollbackStep judges c, a rule against a downgrade, for a rollback from current to target: it
// passes for a downgrade within one minor version (v1.34.4 to v1.34.3) and fails, required
// (force never lets it through), for anything else: across a minor or major version, or not a
// downgrade at all.
func rollbackStep(c Check, current, target Version, bothKnown bool) Check {
	c.Required = true
	switch {
	case !bothKnown:
		return result(c, false, "", "a rollback needs both versions known")
	case !IsPatchDowngrade(current, target):
		return result(c, false, "", fmt.Sprintf("%s to %s is not a rollback within one minor version: only a patch release is rolled back", current, target))
	}
	return result(c, true, fmt.Sprintf("%s to %s: a rollback within one minor version, allowed for this plan only", current, target), "")
}

// IsPatchDowngrade reports whether target is older than current within the same major and minor
// version: the only downgrade a rollback makes.
func IsPatchDowngrade(current, target Version) bool {
	return target.Major == current.Major && target.Minor == current.Minor && target.Compare(current) < 0
}
