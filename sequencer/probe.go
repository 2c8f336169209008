package sequencer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/upgrade-repo/upgrade-repo/redact"
)

// isoProbe is what the ISO's origin said of the ISO.
type isoProbe struct {
	// size is the ISO's size; 0 when the origin did not say.
	size int64
	// ranges is true when the origin answered the range request with 206.
	ranges bool
}

// probeISO asks isoURL for the ISO's first byte (GET with Range: bytes=0-0, as the agents'
// downloads ask for ranges; presigned URLs refuse HEAD) and learns its size from Content-Range's
// total, or from Content-Length when the origin sends the whole file. Its errors say what the
// origin answered, with the URL redacted.
func probeISO(ctx context.Context, hc *http.Client, isoURL string) (isoProbe, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, isoURL, nil)
	if err != nil {
		return isoProbe{}, fmt.Errorf("request %s: %w", redact.URL(isoURL), redact.Error(err))
	}
	req.Header.Set("Range", "bytes=0-0")
	resp, err := hc.Do(req)
	if err != nil {
		return isoProbe{}, fmt.Errorf("GET %s: %w", redact.URL(isoURL), redact.Error(err))
	}
	// The whole file may follow a 200: read none of it.
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusPartialContent:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1))
		size, err := contentRangeTotal(resp.Header.Get("Content-Range"))
		if err != nil {
			return isoProbe{}, fmt.Errorf("GET %s: %w", redact.URL(isoURL), err)
		}
		return isoProbe{size: size, ranges: true}, nil
	case http.StatusOK:
		return isoProbe{size: max(resp.ContentLength, 0)}, nil
	}
	return isoProbe{}, fmt.Errorf("GET %s: %s", redact.URL(isoURL), resp.Status)
}

// errContentRange says a 206 answer's Content-Range does not give the file's size.
var errContentRange = errors.New("the Content-Range header does not give the size")

// contentRangeTotal reads the size from "bytes 0-0/SIZE".
func contentRangeTotal(h string) (int64, error) {
	_, total, ok := strings.Cut(strings.TrimSpace(h), "/")
	if !ok || !strings.HasPrefix(h, "bytes ") {
		return 0, fmt.Errorf("%w: %q", errContentRange, h)
	}
	n, err := strconv.ParseInt(total, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%w: %q", errContentRange, h)
	}
	return n, nil
}
