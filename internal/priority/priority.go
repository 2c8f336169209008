// Package priority lowers the CPU and I/O scheduling priority of the running process, so that a
// background job such as a preload yields to a node's workloads.
//
// Linux keeps both priorities per thread and a new thread inherits its creator's, so Lower sets
// them on every thread the process has. They act within the process's cgroup: the nice value
// weighs its threads against the others of the cgroup under the CPU scheduler, and the I/O class
// is honoured by the BFQ scheduler and by cgroup v2's io.prio.class; the cgroup's own limits
// (a pod's resources, systemd-run -p CPUWeight=... -p IOWeight=...) stay in force on top.
//
// Imports: the standard library only.
package priority

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Linux's ioprio_set(2) constants.
const (
	ioprioWhoProcess = 1
	ioprioClassShift = 13
	// IOClassBestEffort is the default I/O class; its level runs from 0 (first) to 7 (last).
	IOClassBestEffort = 2
	// IOClassIdle gets disk time only when no other process wants it.
	IOClassIdle = 3
)

// Lower sets the nice value of every thread of the process to nice (1 to 19: higher yields more)
// and their I/O class and level (for IOClassBestEffort, level 0 to 7; ignored for IOClassIdle).
// It never raises a priority: a thread already nicer keeps its value.
func Lower(nice, ioClass, ioLevel int) error {
	if nice < 1 || nice > 19 {
		return fmt.Errorf("priority: nice %d: want 1 to 19", nice)
	}
	if ioClass != IOClassBestEffort && ioClass != IOClassIdle {
		return fmt.Errorf("priority: I/O class %d: want best-effort or idle", ioClass)
	}
	if ioLevel < 0 || ioLevel > 7 {
		return fmt.Errorf("priority: I/O level %d: want 0 to 7", ioLevel)
	}
	// Twice, for a thread started while the first pass ran by a thread it had not reached.
	var errs []error
	for range 2 {
		errs = errs[:0]
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("priority: %w", err)
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			errs = append(errs, lowerThread(tid, nice, ioClass, ioLevel))
		}
	}
	return errors.Join(errs...)
}

func lowerThread(tid, nice, ioClass, ioLevel int) error {
	// getpriority(2) returns 20-nice.
	cur, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err == nil && 20-cur < nice {
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil {
			if errors.Is(err, unix.ESRCH) {
				return nil // the thread has exited
			}
			return fmt.Errorf("priority: nice of thread %d: %w", tid, err)
		}
	}
	prio := ioClass<<ioprioClassShift | ioLevel
	if _, _, e := unix.Syscall(unix.SYS_IOPRIO_SET, ioprioWhoProcess, uintptr(tid), uintptr(prio)); e != 0 && e != unix.ESRCH {
		return fmt.Errorf("priority: I/O priority of thread %d: %w", tid, e)
	}
	return nil
}

// Current returns the nice value and the raw I/O priority (class<<13 | level) of thread tid
// (0: the calling thread).
func Current(tid int) (nice, ioprio int, err error) {
	cur, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil {
		return 0, 0, err
	}
	r, _, e := unix.Syscall(unix.SYS_IOPRIO_GET, ioprioWhoProcess, uintptr(tid), 0)
	if e != 0 {
		return 0, 0, e
	}
	return 20 - cur, int(r), nil
}
