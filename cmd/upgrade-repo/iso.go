package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/upgrade-repo/upgrade-repo/internal/httprange"
	"github.com/upgrade-repo/upgrade-repo/internal/redact"
	"github.com/upgrade-repo/upgrade-repo/iso"
	"github.com/upgrade-repo/upgrade-repo/iso/inspect"
	"github.com/upgrade-repo/upgrade-repo/isorelease"
	"github.com/upgrade-repo/upgrade-repo/planview"
	"github.com/upgrade-repo/upgrade-repo/sequencer/repoclient"
)

const isoUsage = `usage: upgrade-repo iso <command> [flags] ISO [...]

ISO is a file or an http(s) URL; a URL is read through Range requests, without downloading it,
within --timeout (default 30m) for the whole command, and printed without its secrets.

  ls [-R] [-l] [-o json] ISO [PATH]   list a directory (or one file)
  stat [-o json] ISO PATH             describe a file: type, mode, size, owner, time, extents
  cat ISO PATH                        write a file's bytes to stdout
  info [-o json] ISO                  volume id, size, trees and extensions, boot entries
  extract ISO DIR [PATH...]           extract the whole tree (or the PATHs) under DIR
  verify [-o json] [--checksum sha512:HEX] ISO
                                      read every file, check every extent lies inside the image
                                      and, with --checksum, the digest of the whole image
`

// runISO inspects an ISO image without mounting it.
func runISO(ctx context.Context, a *app, args []string) error {
	if done, err := helpOrMissing(a.stdout, a.stderr, args, func(w io.Writer) { fmt.Fprint(w, isoUsage) }, "iso needs a command"); done {
		return err
	}
	cmds := map[string]func(context.Context, *app, []string) error{
		"ls": isoLs, "stat": isoStat, "cat": isoCat, "info": isoInfo, "extract": isoExtract, "verify": isoVerify,
	}
	run, ok := cmds[args[0]]
	if !ok {
		fmt.Fprint(a.stderr, isoUsage)
		return fmt.Errorf("%w: unknown iso command %q", errUsage, args[0])
	}
	return run(ctx, a, args[1:])
}

// isoFlags parses flags that may come before, between or after the positional arguments, checks
// their number (least, and most unless it is negative) and the -o of a command that has one.
func isoFlags(a *app, fset *flag.FlagSet, args []string, least, most int) ([]string, error) {
	fset.Usage = func() {
		fmt.Fprintf(fset.Output(), "usage: upgrade-repo iso %s [flags] ISO [...] (upgrade-repo iso help lists the commands)\n", fset.Name())
		fset.PrintDefaults()
	}
	var pos []string
	for {
		switch help, err := parseFlags(a.stdout, fset, args); {
		case help:
			return nil, flag.ErrHelp // the usage is printed; main exits 0
		case err != nil:
			return nil, fmt.Errorf("iso %s: %w", fset.Name(), err)
		}
		args = fset.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if len(pos) < least || (most >= 0 && len(pos) > most) {
		return nil, fmt.Errorf("%w: iso %s: wrong number of arguments (see upgrade-repo iso help)", errUsage, fset.Name())
	}
	if o := fset.Lookup("o"); o != nil {
		if err := checkOutput(o.Value.String(), "text", "json"); err != nil {
			return nil, err
		}
	}
	return pos, nil
}

func isoFlagSet(a *app, name string) (*flag.FlagSet, *string) {
	fset := flag.NewFlagSet(name, flag.ContinueOnError)
	fset.SetOutput(a.stderr)
	out := fset.String("o", "text", "output format: text or json")
	return fset, out
}

// isoDefaultTimeout bounds every read of a remote image by one command: a 6 GB image read whole
// (verify --checksum) at 4 MB/s fits; an origin that sends a byte now and then fails in time.
const isoDefaultTimeout = 30 * time.Minute

// isoTimeoutFlag adds --timeout, the deadline of all the reads of a remote image, to fset.
func isoTimeoutFlag(fset *flag.FlagSet) *time.Duration {
	return fset.Duration("timeout", isoDefaultTimeout, "how long all the reads of a remote ISO may take together (0: no limit)")
}

// isoName is the image's name as it is printed: a URL without its secrets (user:password,
// presigned query), a file as it is.
func isoName(name string) string {
	if repoclient.IsURL(name) {
		return redact.URL(name)
	}
	return name
}

// isoImage is an opened image.
type isoImage struct {
	ra    io.ReaderAt
	fsys  *iso.FS
	size  int64
	close func() error
}

// isoOpen opens the image name: a file, or an http(s) URL read through Range requests without
// downloading it (a few hundred KB for a listing or the release metadata), all its reads within
// timeout (none when it is 0).
func isoOpen(ctx context.Context, a *app, name string, timeout time.Duration) (*isoImage, error) {
	remote, err := isorelease.CheckSource(name)
	if err != nil {
		return nil, err
	}
	if remote {
		r, err := httprange.Open(ctx, &http.Client{Timeout: 5 * time.Minute}, name, httprange.WithDeadline(timeout))
		if err != nil {
			return nil, err
		}
		fsys, err := iso.Open(r, r.Size())
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("%s: %w", redact.URL(name), err)
		}
		done := func() error {
			reqs, n := r.Stats()
			a.log.Debug("remote ISO read", "url", redact.URL(name), "size", r.Size(), "requests", reqs, "bytes", n)
			return r.Close()
		}
		return &isoImage{ra: r, fsys: fsys, size: r.Size(), close: done}, nil
	}
	fsys, f, err := iso.OpenFile(name)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &isoImage{ra: f, fsys: fsys, size: st.Size(), close: f.Close}, nil
}

func (im *isoImage) Close() error { return im.close() }

// isoOpenPath parses the flags and the arguments ISO PATH of a command (stat, cat), checks PATH,
// then opens ISO. It returns the image, ISO as given and PATH as an fs.FS path.
func isoOpenPath(ctx context.Context, a *app, fset *flag.FlagSet, args []string, timeout *time.Duration) (*isoImage, string, string, error) {
	pos, err := isoFlags(a, fset, args, 2, 2)
	if err != nil {
		return nil, "", "", err
	}
	clean, err := isoPath(pos[1])
	if err != nil {
		return nil, "", "", err
	}
	im, err := isoOpen(ctx, a, pos[0], *timeout)
	if err != nil {
		return nil, "", "", err
	}
	return im, pos[0], clean, nil
}

// isoPath turns a user's path ("/bundle/", "bundle", "/") into an fs.FS path.
func isoPath(p string) (string, error) {
	clean, err := inspect.CleanPath(p)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errUsage, err)
	}
	return clean, nil
}

func isoLs(ctx context.Context, a *app, args []string) error {
	fset, out := isoFlagSet(a, "ls")
	recursive := fset.Bool("R", false, "list subdirectories recursively")
	long := fset.Bool("l", false, "long listing: mode, links, owner, size, time, name")
	timeout := isoTimeoutFlag(fset)
	pos, err := isoFlags(a, fset, args, 1, 2)
	if err != nil {
		return err
	}
	target := "."
	if len(pos) == 2 {
		if target, err = isoPath(pos[1]); err != nil {
			return err
		}
	}
	im, err := isoOpen(ctx, a, pos[0], *timeout)
	if err != nil {
		return err
	}
	defer im.Close()
	list, dir, err := inspect.List(im.fsys, target, *recursive)
	if err != nil {
		return fmt.Errorf("ls %s: %w", isoName(pos[0]), err)
	}
	if *out == "json" {
		return planview.Encode(a.stdout, list)
	}
	inspect.WriteList(a.stdout, list, dir, *recursive, *long)
	return nil
}

func isoStat(ctx context.Context, a *app, args []string) error {
	fset, out := isoFlagSet(a, "stat")
	timeout := isoTimeoutFlag(fset)
	im, name, p, err := isoOpenPath(ctx, a, fset, args, timeout)
	if err != nil {
		return err
	}
	defer im.Close()
	info, err := im.fsys.Lstat(p)
	if err != nil {
		return fmt.Errorf("stat %s: %w", isoName(name), err)
	}
	e := inspect.Describe(im.fsys, p, info)
	if *out == "json" {
		return planview.Encode(a.stdout, e)
	}
	inspect.WriteStat(a.stdout, im.fsys, p, e)
	return nil
}

func isoCat(ctx context.Context, a *app, args []string) error {
	fset := flag.NewFlagSet("cat", flag.ContinueOnError)
	fset.SetOutput(a.stderr)
	timeout := isoTimeoutFlag(fset)
	im, name, p, err := isoOpenPath(ctx, a, fset, args, timeout)
	if err != nil {
		return err
	}
	defer im.Close()
	f, err := im.fsys.Open(p)
	if err != nil {
		return fmt.Errorf("cat %s: %w", isoName(name), err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return fmt.Errorf("cat %s: is a directory", p)
	}
	if _, err := io.Copy(a.stdout, inspect.Reader{Ctx: ctx, R: f}); err != nil {
		return fmt.Errorf("cat %s: %w", p, err)
	}
	return nil
}
