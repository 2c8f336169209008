// Package redact removes secrets from URLs before they are printed: in logs, in status
// endpoints, in error messages and in the reports an agent writes into the cluster.
//
// Origins of a release ISO are often authenticated in the URL itself, with a password
// (https://user:password@host/...) or a signed query (an S3 presigned URL carries its
// X-Amz-Signature there). Every place that prints a URL passes it through URL first, and every
// error of net/http's client, which quotes the URL it was asked for, through Error.
//
// Imports: the standard library only.
package redact

import "net/url"

// Unparsable is what URL returns for a string that is not a URL: it cannot be told which part
// of it is secret, so none of it is printed.
const Unparsable = "(unparsable URL)"

// URL returns raw without the parts that may hold a secret: the user information
// (user:password@), the query and the fragment. What stays (scheme, host and path) still says
// which origin was meant. It is the form the sequencer prints too.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return Unparsable
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return u.String()
}

// Error returns err with the URL of a *url.Error redacted, as net/http's client and url.Parse
// return it (`Get "https://...?X-Amz-Signature=...": dial tcp ...`). Call it on the error such
// a call returned, before wrapping it: the *url.Error is replaced by a copy, so errors.Is and
// errors.As still see what it wraps (a timeout, context.Canceled). Other errors are returned as
// they are.
func Error(err error) error {
	ue, ok := err.(*url.Error) //nolint:errorlint // only an unwrapped *url.Error can be replaced by a copy
	if !ok {
		return err
	}
	return &url.Error{Op: ue.Op, URL: URL(ue.URL), Err: ue.Err}
}
