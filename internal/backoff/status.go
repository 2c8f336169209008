package backoff

import "net/http"

// RetryableStatus reports whether an HTTP answer with status code may be asked again with
// another result: 408 Request Timeout, 429 Too Many Requests and a 5xx other than 501 Not
// Implemented (a server restarting, overloaded or behind a proxy that lost it). It is the one
// rule of the module for which answers are retried; every other status is an answer.
func RetryableStatus(code int) bool {
	switch {
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests:
		return true
	case code >= http.StatusInternalServerError && code != http.StatusNotImplemented:
		return code < 600
	}
	return false
}
