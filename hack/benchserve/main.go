// Command benchserve is the load client of `make bench-serve`: it measures, side by side, servers
// that serve the same release (nginx over the extracted tree, upgrade-repo over the ISO) on
// large-file throughput (parallel downloads of a large file), small-file requests per second
// (many connections asking for one small file, from wrk when -wrk names it, else from a Go
// client) and the server's CPU time per small request, server CPU seconds per GB sent and peak
// RSS, and prints a table and then one name=value line per figure.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/upgrade-repo/upgrade-repo/internal/httprange"
)

// target is one server under test and the processes whose CPU and memory it uses.
type target struct {
	name string
	base string
	pids []int
}

func parseTarget(s string) (target, error) {
	// name=URL@pid,pid
	name, rest, ok := strings.Cut(s, "=")
	if !ok {
		return target{}, fmt.Errorf("target %q: want name=URL@pid[,pid...]", s)
	}
	url, pids, ok := strings.Cut(rest, "@")
	if !ok {
		return target{}, fmt.Errorf("target %q: want name=URL@pid[,pid...]", s)
	}
	t := target{name: name, base: strings.TrimSuffix(url, "/")}
	for _, p := range strings.Split(pids, ",") {
		n, err := strconv.Atoi(p)
		if err != nil {
			return target{}, fmt.Errorf("target %q: pid %q: %w", s, p, err)
		}
		t.pids = append(t.pids, n)
	}
	return t, nil
}

// cpuSeconds returns the user+system CPU time of the processes.
func cpuSeconds(pids []int) (float64, error) {
	var total float64
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, err
		}
		s := string(data)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		ut, _ := strconv.ParseFloat(fields[11], 64)
		st, _ := strconv.ParseFloat(fields[12], 64)
		total += (ut + st) / 100 // USER_HZ is 100 on Linux
	}
	return total, nil
}

// status returns the largest value of a /proc/PID/status field (such as VmHWM) among the
// processes, in MiB.
func status(pids []int, field string) (float64, error) {
	var peak float64
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, field+":"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
				peak = max(peak, kb/1024)
			}
		}
	}
	return peak, nil
}

// anonSampler keeps the peak of RssAnon (private memory, without the file-backed pages of the
// executable that RSS also counts) of each target, sampled every 50ms until stop is closed.
func anonSampler(targets []target, stop <-chan struct{}) []float64 {
	peaks := make([]float64, len(targets))
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		for i, tg := range targets {
			if v, err := status(tg.pids, "RssAnon"); err == nil {
				peaks[i] = max(peaks[i], v)
			}
		}
		select {
		case <-stop:
			return peaks
		case <-t.C:
		}
	}
}

func client(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true,
	}}
}

// large downloads path with parallel connections, each rounds times, and returns bytes and time.
func large(ctx context.Context, t target, path string, parallel, rounds int) (int64, time.Duration, error) {
	c := client(parallel)
	var total atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, t.base+path, nil)
				resp, err := c.Do(req)
				if err == nil {
					var n int64
					n, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					total.Add(n)
					if err == nil && resp.StatusCode != 200 {
						err = fmt.Errorf("%s: status %d", t.name, resp.StatusCode)
					}
				}
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return total.Load(), time.Since(start), firstErr
}

// small asks for path over conns connections for d and returns the requests answered.
func small(ctx context.Context, t target, path string, conns int, d time.Duration) (int64, time.Duration, error) {
	c := client(conns)
	var done atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	buf := make([][]byte, conns)
	start := time.Now()
	for i := range conns {
		buf[i] = make([]byte, 64<<10)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, t.base+path, nil)
				resp, err := c.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						once.Do(func() { firstErr = err })
					}
					return
				}
				_, err = io.CopyBuffer(io.Discard, resp.Body, buf[i])
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 {
					if ctx.Err() == nil {
						once.Do(func() { firstErr = errors.Join(err, fmt.Errorf("%s: status %d", t.name, resp.StatusCode)) })
					}
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return done.Load(), time.Since(start), firstErr
}

// smallWrk has wrk (one thread) ask for path over conns connections for d and returns the
// requests answered. Any answer other than 200 is an error.
func smallWrk(ctx context.Context, wrk string, t target, path string, conns int, d time.Duration) (int64, time.Duration, error) {
	out, err := exec.CommandContext(ctx, wrk, "-t1", "-c"+strconv.Itoa(conns), "-d"+d.String(), t.base+path).CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("%s: wrk: %w: %s", t.name, err, out)
	}
	if m := wrkBad.FindSubmatch(out); m != nil {
		return 0, 0, fmt.Errorf("%s: wrk: %s", t.name, m[0])
	}
	m := wrkDone.FindSubmatch(out)
	if m == nil {
		return 0, 0, fmt.Errorf("%s: wrk printed no request count: %s", t.name, out)
	}
	n, err := strconv.ParseInt(string(m[1]), 10, 64)
	if err != nil {
		return 0, 0, err
	}
	took, err := time.ParseDuration(string(m[2]))
	if err != nil {
		return 0, 0, fmt.Errorf("%s: wrk's duration %q: %w", t.name, m[2], err)
	}
	return n, took, nil
}

var (
	wrkDone = regexp.MustCompile(`(\d+) requests in ([0-9.]+[a-z]+),`)
	wrkBad  = regexp.MustCompile(`(Non-2xx or 3xx responses|Socket errors): [^\n]*`)
)

// ranged has clients download path at once, each over its own connection in ranges of rangeSize
// bytes, from its own starting point (client i starts at i/clients of the file) round to where
// it started: the whole file each, as every node's upgrade step pulling from one Service. It
// returns the bytes received and the time.
func ranged(ctx context.Context, t target, path string, clients int, rangeSize int64) (int64, time.Duration, error) {
	head, err := http.NewRequestWithContext(ctx, http.MethodHead, t.base+path, nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := http.DefaultClient.Do(head)
	if err != nil {
		return 0, 0, err
	}
	resp.Body.Close()
	size := resp.ContentLength
	if resp.StatusCode != 200 || size <= 0 {
		return 0, 0, fmt.Errorf("%s: HEAD %s: status %d, length %d", t.name, path, resp.StatusCode, size)
	}
	var total atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := client(1)
			buf := make([]byte, 256<<10)
			first := size * int64(i) / int64(clients) / rangeSize * rangeSize
			for done := int64(0); done < size; {
				off := (first + done) % size
				n := min(rangeSize, size-off)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, t.base+path, nil)
				req.Header.Set("Range", httprange.Request(off, n))
				resp, err := c.Do(req)
				if err == nil {
					var got int64
					got, err = io.CopyBuffer(io.Discard, resp.Body, buf)
					resp.Body.Close()
					total.Add(got)
					if err == nil && (resp.StatusCode != http.StatusPartialContent || got != n) {
						err = fmt.Errorf("%s: range %d+%d: status %d, %d bytes", t.name, off, n, resp.StatusCode, got)
					}
				}
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				done += n
			}
		}()
	}
	wg.Wait()
	return total.Load(), time.Since(start), firstErr
}

type result struct {
	largeMBps, smallRPS, cpuPerGB, rssMiB, anonMiB float64
	smallCPUus                                     float64 // server CPU per small request, best run
	rangedMBps, rangedAnonMiB, rangedRSSMiB        float64
}

func main() {
	var targets []target
	flag.Func("target", "a server: name=URL@pid[,pid...] (repeat; the first is the baseline)", func(s string) error {
		t, err := parseTarget(s)
		targets = append(targets, t)
		return err
	})
	largePath := flag.String("large", "/rootfs.squashfs", "path of the large file")
	smallPath := flag.String("small", "/harvester-release.yaml", "path of the small file")
	parallel := flag.Int("parallel", 4, "parallel downloads of the large file")
	rounds := flag.Int("rounds", 1, "downloads of the large file per connection")
	conns := flag.Int("conns", 64, "connections asking for the small file")
	dur := flag.Duration("duration", 5*time.Second, "how long each small-file run lasts")
	repeat := flag.Int("repeat", 2, "runs per target and test, interleaved; the best run counts")
	rangedClients := flag.Int("ranged-clients", 0, "clients downloading the large file by ranges at once, once per target (0: no such run)")
	rangedSize := flag.Int64("ranged-size", 8<<20, "bytes per range of the ranged run")
	wrk := flag.String("wrk", "", "path of wrk, the load of the small-file runs (empty: a Go client, which tops out before the servers do)")
	flag.Parse()
	if len(targets) < 2 {
		fmt.Fprintln(os.Stderr, "benchserve: give a baseline and at least one other -target")
		os.Exit(2)
	}
	ctx := context.Background()
	stop := make(chan struct{})
	anon := make(chan []float64, 1)
	go func() { anon <- anonSampler(targets, stop) }()
	res := make([]result, len(targets))
	cpu := make([]float64, len(targets))
	bytes := make([]int64, len(targets))
	for r := range *repeat {
		for i, t := range targets {
			c0, err := cpuSeconds(t.pids)
			check(err)
			n, d, err := large(ctx, t, *largePath, *parallel, *rounds)
			check(err)
			c1, err := cpuSeconds(t.pids)
			check(err)
			cpu[i] += c1 - c0
			bytes[i] += n
			mbps := float64(n) / d.Seconds() / 1e6
			fmt.Fprintf(os.Stderr, "run %d %-12s large: %d bytes in %s = %.0f MB/s, %.2f CPU s\n", r+1, t.name, n, d.Round(time.Millisecond), mbps, c1-c0)
			res[i].largeMBps = max(res[i].largeMBps, mbps)
		}
		for i, t := range targets {
			c0, err := cpuSeconds(t.pids)
			check(err)
			var n int64
			var d time.Duration
			if *wrk != "" {
				n, d, err = smallWrk(ctx, *wrk, t, *smallPath, *conns, *dur)
			} else {
				n, d, err = small(ctx, t, *smallPath, *conns, *dur)
			}
			check(err)
			c1, err := cpuSeconds(t.pids)
			check(err)
			rps := float64(n) / d.Seconds()
			us := (c1 - c0) / float64(n) * 1e6
			fmt.Fprintf(os.Stderr, "run %d %-12s small: %d requests in %s = %.0f req/s, %.2f CPU us per request\n", r+1, t.name, n, d.Round(time.Millisecond), rps, us)
			res[i].smallRPS = max(res[i].smallRPS, rps)
			if res[i].smallCPUus == 0 || us < res[i].smallCPUus {
				res[i].smallCPUus = us
			}
		}
	}
	close(stop)
	anonPeaks := <-anon
	if *rangedClients > 0 {
		// Each target alone, so that its peak memory in this run is its own.
		for i, t := range targets {
			stop := make(chan struct{})
			go func() { anon <- anonSampler(targets[i:i+1], stop) }()
			n, d, err := ranged(ctx, t, *largePath, *rangedClients, *rangedSize)
			close(stop)
			peak := (<-anon)[0]
			check(err)
			rss, err := status(t.pids, "VmRSS")
			check(err)
			mbps := float64(n) / d.Seconds() / 1e6
			fmt.Fprintf(os.Stderr, "%-12s ranged: %d clients, %d bytes in %s = %.0f MB/s, peak anon %.1f MiB\n", t.name, *rangedClients, n, d.Round(time.Millisecond), mbps, peak)
			res[i].rangedMBps, res[i].rangedAnonMiB, res[i].rangedRSSMiB = mbps, peak, rss
		}
	}
	for i, t := range targets {
		res[i].cpuPerGB = cpu[i] / (float64(bytes[i]) / 1e9)
		rss, err := status(t.pids, "VmHWM")
		check(err)
		res[i].rssMiB = rss
		res[i].anonMiB = anonPeaks[i]
	}

	fmt.Printf("\n%-14s %12s %12s %13s %13s %13s %13s\n", "server", "large MB/s", "small req/s", "CPU us/small", "CPU s per GB", "peak RSS MiB", "peak anon MiB")
	for i, t := range targets {
		fmt.Printf("%-14s %12.0f %12.0f %13.2f %13.3f %13.1f %13.1f\n", t.name, res[i].largeMBps, res[i].smallRPS, res[i].smallCPUus, res[i].cpuPerGB, res[i].rssMiB, res[i].anonMiB)
	}
	if *rangedClients > 0 {
		fmt.Printf("\n%d clients at once, %s by ranges of %d MiB, the whole file each:\n", *rangedClients, *largePath, *rangedSize>>20)
		fmt.Printf("%-14s %12s %14s %15s\n", "server", "total MB/s", "peak anon MiB", "RSS after MiB")
		for i, t := range targets {
			fmt.Printf("%-14s %12.0f %14.1f %15.1f\n", t.name, res[i].rangedMBps, res[i].rangedAnonMiB, res[i].rangedRSSMiB)
		}
	}
	fmt.Println()
	base := res[0]
	for i, t := range targets {
		n := strings.ReplaceAll(t.name, "-", "_")
		fmt.Printf("large_mbps_%s=%.0f\n", n, res[i].largeMBps)
		fmt.Printf("small_rps_%s=%.0f\n", n, res[i].smallRPS)
		fmt.Printf("small_cpu_us_%s=%.2f\n", n, res[i].smallCPUus)
		fmt.Printf("cpu_s_per_gb_%s=%.3f\n", n, res[i].cpuPerGB)
		fmt.Printf("peak_rss_mib_%s=%.1f\n", n, res[i].rssMiB)
		fmt.Printf("peak_anon_mib_%s=%.1f\n", n, res[i].anonMiB)
		if *rangedClients > 0 {
			fmt.Printf("ranged_mbps_%s=%.0f\n", n, res[i].rangedMBps)
			fmt.Printf("ranged_peak_anon_mib_%s=%.1f\n", n, res[i].rangedAnonMiB)
		}
	}
	for i, t := range targets[1:] {
		r := res[i+1]
		n := strings.ReplaceAll(t.name, "-", "_")
		prefix := ""
		if len(targets) > 2 {
			prefix = n + "_"
		}
		fmt.Printf("%slarge_vs_%s=%.2f\n", prefix, targets[0].name, r.largeMBps/base.largeMBps)
		fmt.Printf("%ssmall_vs_%s=%.2f\n", prefix, targets[0].name, r.smallRPS/base.smallRPS)
		fmt.Printf("%ssmall_cpu_vs_%s=%.2f\n", prefix, targets[0].name, r.smallCPUus/base.smallCPUus)
		fmt.Printf("%scpu_per_gb_vs_%s=%.2f\n", prefix, targets[0].name, r.cpuPerGB/base.cpuPerGB)
		if *rangedClients > 0 {
			fmt.Printf("%sranged_vs_%s=%.2f\n", prefix, targets[0].name, r.rangedMBps/base.rangedMBps)
		}
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchserve:", err)
		os.Exit(1)
	}
}
