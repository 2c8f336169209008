package policy

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a parsed Harvester version: vMAJOR.MINOR.PATCH with an optional pre-release after a
// hyphen (v1.6.0-rc1, v1.5.2-dev-20250101). The leading v is optional; build metadata after a
// plus sign is kept but does not affect ordering.
type Version struct {
	Major, Minor, Patch int
	// Pre is the pre-release part without its hyphen; empty for a release.
	Pre string
	// Build is the build metadata without its plus sign.
	Build string
}

// ParseVersion parses s, returning an error that quotes s when it is not a version.
func ParseVersion(s string) (Version, error) {
	in := strings.TrimSpace(s)
	rest := strings.TrimPrefix(in, "v")
	var v Version
	if i := strings.IndexByte(rest, '+'); i >= 0 {
		v.Build = rest[i+1:]
		rest = rest[:i]
		if v.Build == "" {
			return Version{}, fmt.Errorf("version %q: empty build metadata after +", s)
		}
	}
	if i := strings.IndexByte(rest, '-'); i >= 0 {
		v.Pre = rest[i+1:]
		rest = rest[:i]
		if v.Pre == "" {
			return Version{}, fmt.Errorf("version %q: empty pre-release after -", s)
		}
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 {
		return Version{}, fmt.Errorf("version %q: want vMAJOR.MINOR.PATCH", s)
	}
	nums := [3]*int{&v.Major, &v.Minor, &v.Patch}
	for i, p := range parts {
		if p == "" || strings.TrimLeft(p, "0123456789") != "" || len(p) > 9 {
			return Version{}, fmt.Errorf("version %q: %q is not a number", s, p)
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return Version{}, fmt.Errorf("version %q: %w", s, err)
		}
		*nums[i] = n
	}
	return v, nil
}

// IsPrerelease reports whether v has a pre-release part (rc, dev, head builds).
func (v Version) IsPrerelease() bool { return v.Pre != "" }

// String writes v back as vMAJOR.MINOR.PATCH[-PRE][+BUILD].
func (v Version) String() string {
	s := fmt.Sprintf("v%d.%d.%d", v.Major, v.Minor, v.Patch)
	if v.Pre != "" {
		s += "-" + v.Pre
	}
	if v.Build != "" {
		s += "+" + v.Build
	}
	return s
}

// Compare returns -1, 0 or 1 as v sorts before, equal to or after o, by semantic versioning
// precedence: a pre-release sorts before its release, and pre-release identifiers separated by
// dots or hyphens compare numerically when both are numbers and as text otherwise.
func (v Version) Compare(o Version) int {
	for _, d := range [3]int{v.Major - o.Major, v.Minor - o.Minor, v.Patch - o.Patch} {
		if d != 0 {
			return sign(d)
		}
	}
	switch {
	case v.Pre == o.Pre:
		return 0
	case v.Pre == "":
		return 1
	case o.Pre == "":
		return -1
	}
	a, b := splitPre(v.Pre), splitPre(o.Pre)
	for i := 0; i < len(a) && i < len(b); i++ {
		if c := compareIdent(a[i], b[i]); c != 0 {
			return c
		}
	}
	return sign(len(a) - len(b))
}

// SameMinor reports whether v and o share major and minor versions.
func (v Version) SameMinor(o Version) bool { return v.Major == o.Major && v.Minor == o.Minor }

func splitPre(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == '.' || r == '-' })
}

// compareIdent compares pre-release identifiers; a number sorts before text, and an identifier
// like rc10 compares its text then its number so that rc2 < rc10.
func compareIdent(a, b string) int {
	an, aNum := atoi(a)
	bn, bNum := atoi(b)
	switch {
	case aNum && bNum:
		return sign(an - bn)
	case aNum:
		return -1
	case bNum:
		return 1
	}
	ap, as := splitTrailingNumber(a)
	bp, bs := splitTrailingNumber(b)
	if ap == bp && as != "" && bs != "" {
		an, _ := atoi(as)
		bn, _ := atoi(bs)
		return sign(an - bn)
	}
	return strings.Compare(a, b)
}

func splitTrailingNumber(s string) (string, string) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	if len(s)-i > 9 {
		return s, ""
	}
	return s[:i], s[i:]
}

func atoi(s string) (int, bool) {
	if s == "" || len(s) > 18 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

func sign(d int) int {
	switch {
	case d < 0:
		return -1
	case d > 0:
		return 1
	}
	return 0
}
