package memberlist

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of the gossip log limit: garbage sent to the gossip port makes memberlist log one
// line per packet, which would fill a node's logs at the speed of the network.
const (
	logBurst    = 10          // lines of one kind logged per window
	logWindow   = time.Minute // the window
	logKinds    = 128         // kinds tracked at once; the rest share one
	logKindHead = 48          // how much of a line, numbers blanked, makes its kind
)

// logLimiter bounds the lines of each kind that the gossip log bridge passes on: at most burst
// in each window; the next line passed on after a window in which lines were dropped says how
// many. A kind is the head of the line (before its details) with its numbers blanked, so that the
// same complaint about different senders (from=10.0.0.7:41234) is one kind. It is safe for
// concurrent use.
type logLimiter struct {
	burst  int
	window time.Duration
	now    func() time.Time

	mu    sync.Mutex
	kinds map[string]*logKind

	seen atomic.Int64 // lines offered, passed on or not
}

type logKind struct {
	start      time.Time // of the current window
	passed     int       // lines passed on in it
	suppressed int       // lines dropped since the last one passed on
}

func newLogLimiter() *logLimiter {
	return &logLimiter{burst: logBurst, window: logWindow, now: time.Now, kinds: map[string]*logKind{}}
}

// allow reports whether line may be logged now and, when it may, how many lines of its kind
// were dropped before it.
func (l *logLimiter) allow(line string) (ok bool, suppressed int) {
	l.seen.Add(1)
	key := kindOf(line)
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.kinds[key]
	if k == nil {
		if len(l.kinds) >= logKinds {
			key = "" // the overflow kind: memory stays bounded whatever the lines say
			k = l.kinds[key]
		}
		if k == nil {
			k = &logKind{start: now}
			l.kinds[key] = k
		}
	}
	if now.Sub(k.start) >= l.window {
		k.start, k.passed = now, 0
	}
	if k.passed >= l.burst {
		k.suppressed++
		return false, 0
	}
	k.passed++
	suppressed, k.suppressed = k.suppressed, 0
	return true, suppressed
}

// kindOf returns the kind of a log line: its head (up to the first ": ", where the details of
// an error begin, such as a checksum in hex), each run of digits made one '#'.
func kindOf(line string) string {
	line, _, _ = strings.Cut(line, ": ")
	var b strings.Builder
	digits := false
	for _, r := range line {
		if b.Len() >= logKindHead {
			break
		}
		isDigit := r >= '0' && r <= '9'
		switch {
		case isDigit && !digits:
			b.WriteByte('#')
		case !isDigit:
			b.WriteRune(r)
		}
		digits = isDigit
	}
	return b.String()
}
