package runner

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/internal/proc"
	"github.com/airlock-sandbox/airlock/internal/realpath"
	"github.com/airlock-sandbox/airlock/lifecycle"
	"github.com/airlock-sandbox/airlock/store"
)

// runID matches the ids airlock gives runs; the reaper touches nothing else.
var runID = regexp.MustCompile(`^[0-9a-f]{20}$`)

// owner is written first into every run directory: who runs it, and until
// when.
type owner struct {
	PID int `json:"pid"`
	// Start is the process's start time in clock ticks since boot, so a
	// recycled pid is not mistaken for the owner.
	Start    uint64    `json:"start"`
	Deadline time.Time `json:"deadline"`
}

const ownerFile = "owner.json"

func writeOwner(dir string, deadline time.Time) error {
	o := owner{PID: os.Getpid(), Start: procStart(os.Getpid()), Deadline: deadline}
	b, _ := json.Marshal(o)
	// Not synced: after a power loss its owner is gone anyway, and a
	// missing or torn owner file reads as orphaned.
	return atomicfile.Replace(filepath.Join(dir, ownerFile), b, 0o600)
}

// procStart is a running process's start time; 0 when it is gone or has
// exited: a zombie owner is gone (internal/proc's rule), though its pid is
// not free yet.
func procStart(pid int) uint64 {
	st, err := proc.ReadStat(pid)
	if err != nil || !st.Alive() {
		return 0
	}
	return st.StartTime
}

// alive reports whether o names a process that is running now. A torn or
// hand-edited record's zero owner (pid 0, start 0) names nobody: procStart
// of a missing process is 0 too, so the start time alone would match it.
func (o owner) alive() bool {
	return o.PID > 0 && o.Start != 0 && procStart(o.PID) == o.Start
}

// ReapReport says what a reap did.
type ReapReport struct {
	Reaped []string `json:"reaped"`
	// Live counts runs left alone: their owner is alive and in time.
	Live int `json:"live"`
}

// freshGrace spares a run directory whose owner file has not been written
// yet because the run is starting this instant.
const freshGrace = time.Minute

// Reap removes every run whose owner process died or whose deadline passed:
// containers, runtime state, cgroups, mounts, bundles and run directories.
// With full set it also asks each engine for leftovers that no run
// directory names (their directory went first, or the state was lost).
// engines is called for the engines once there is something to free (at
// once with full), so that a sweep that frees nothing reaches no engine.
// root is resolved as New resolves a runner's (ResolveRoot).
func Reap(ctx context.Context, root string, engines func() []engine.Reaper, full bool) (ReapReport, error) {
	root = ResolveRoot(root)
	var rep ReapReport
	reapers := sync.OnceValue(func() []engine.Reaper {
		if engines == nil {
			return nil
		}
		return engines()
	})
	ids := map[string]bool{}
	runs := filepath.Join(root, "runs")
	ents, _ := os.ReadDir(runs)
	for _, e := range ents {
		ids[e.Name()] = true
	}
	var errs []error
	if full {
		// The image store's half-unpacked trees, which runs no longer
		// look for.
		// (Open would create a store where there is none.)
		dir := filepath.Join(root, "store")
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			if st, err := store.Open(dir); err == nil {
				st.Sweep()
			}
		}
		for _, r := range reapers() {
			left, err := r.Leftovers(ctx)
			if err != nil {
				errs = append(errs, err)
			}
			for _, id := range left {
				ids[id] = true
			}
		}
	}
	lc, err := lifecycle.Open(root)
	if err != nil {
		return rep, err
	}
	for id := range ids {
		if !runID.MatchString(id) {
			continue
		}
		status := ownerStatus(filepath.Join(runs, id))
		if status == "" {
			rep.Live++
			continue
		}
		if err := destroyRun(ctx, lc, root, reapers(), id, string(status), lockTimeout); err != nil {
			errs = append(errs, fmt.Errorf("reaping %q: %w", id, err))
		}
		rep.Reaped = append(rep.Reaped, id)
	}
	// Long-lived sandboxes: expired, orphaned, or (full) failed.
	if err := reapSandboxes(ctx, lc, root, reapers, full, ids, &rep); err != nil {
		errs = append(errs, err)
	}
	return rep, errors.Join(errs...)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// ownerStatus says why a run may be reaped: orphaned (its owner is gone,
// or its directory or owner file is), expired (its deadline passed), or ""
// when its owner is alive and in time. A directory too new to have its
// owner file yet counts as live.
func ownerStatus(dir string) lifecycle.State {
	b, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if err != nil {
		if fi, serr := os.Stat(dir); serr == nil && time.Since(fi.ModTime()) < freshGrace {
			return ""
		}
		return lifecycle.Orphaned
	}
	var o owner
	if json.Unmarshal(b, &o) != nil {
		return lifecycle.Orphaned // corrupt: airlock's, and nobody can be proven to own it
	}
	switch {
	case !o.alive():
		return lifecycle.Orphaned
	case !time.Now().Before(o.Deadline):
		return lifecycle.Expired
	}
	return ""
}

// removeRunDir unmounts anything under dir (the output tmpfs) and removes it.
func removeRunDir(dir string) error {
	for _, m := range mountsUnder(dir) {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmounting %q: %w", m, err)
		}
	}
	return os.RemoveAll(dir)
}

// mountsUnder lists mount points at or below dir, deepest first.
// mountinfo names a mount point absolute, with its symlinks resolved and
// its spaces, tabs, newlines and backslashes octal-escaped; dir is taken
// to that form (realpath.Of), and each mount point decoded, before they are
// compared: a relative root, one reached through a symlink or one with a
// space in its path would otherwise match nothing, and its runs' mounts
// would keep their directories busy for good.
func mountsUnder(dir string) []string {
	dir = realpath.Of(dir)
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) <= 4 {
			continue
		}
		if m := unescapeMountinfo(fields[4]); m == dir || strings.HasPrefix(m, dir+"/") {
			out = append(out, m)
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// unescapeMountinfo decodes the \ooo octal escapes the kernel writes in
// mountinfo's paths (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] >= '0' && s[i+1] <= '3' && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
