// Package printable makes text that came from outside (a node step's message, a reason in a
// status, an origin's error) safe to print on an operator's terminal: a control character there
// (an escape sequence, a carriage return, a bidirectional override) could move the cursor,
// rewrite what was printed before or change the terminal's state.
//
// Imports: the standard library only.
package printable

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// String returns s with every rune that does not print (C0 and C1 controls, DEL, format
// characters such as bidirectional overrides, separators other than the space) and every byte of
// invalid UTF-8 written as a Go escape: \x1b, \u202e. What prints is kept as it is. The result
// holds no control character and no newline.
func String(s string) string {
	if safe(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == ' ' || unicode.IsPrint(r):
			b.WriteString(s[i : i+size])
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += size
	}
	return b.String()
}

// safe reports whether s prints as it is.
func safe(s string) bool {
	for _, r := range s {
		if r != ' ' && !unicode.IsPrint(r) { // RuneError, for invalid UTF-8, prints: checked below
			return false
		}
	}
	return utf8.ValidString(s)
}
