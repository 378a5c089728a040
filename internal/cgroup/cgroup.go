// Package cgroup gives each run a cgroup that airlock owns, on cgroup v1
// (and hybrid) and v2 hosts alike, through containerd/cgroups.
//
// airlock creates the group with its limits before the runtime starts and
// deletes it after the runtime is gone. runsc joins a cgroup that already
// exists without changing or removing it, so the counters that say how a
// run ended (OOM kills, pids-limit hits, peaks) outlive the sandbox long
// enough to be read.
package cgroup

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// Parent is the cgroup under which every run's group lives.
const Parent = "/airlock"

const mountpoint = "/sys/fs/cgroup"

// Limits are applied to the group itself.
type Limits struct {
	Memory    int64 // bytes; swap is set equal, so none is granted on top
	MilliCPUs int64
	Pids      int64
}

// Stats are what the group recorded.
type Stats struct {
	MemoryPeak int64
	CPU        time.Duration
	PidsPeak   int64
	// OOMKills counts tasks the kernel killed at the memory limit. On v1
	// it is counted in the victim's own cgroup, so a runtime that nests and
	// removes a child cgroup takes it along; MemoryLimitHits stays.
	OOMKills uint64
	// MemoryLimitHits counts charges that met the memory limit: v2's
	// memory.events "max"; v1's failcnt, which recent kernels leave at 0.
	MemoryLimitHits uint64
	// PidsLimitHits counts forks refused at the pids limit.
	PidsLimitHits uint64
}

// Group is one run's cgroup.
type Group struct {
	path string // relative to the hierarchy root, e.g. /airlock/<id>
	root string // where the v2 hierarchy is mounted
	v1   cgroup1.Cgroup
	v2   *cgroup2.Manager
}

// Unified reports whether the host uses the cgroup v2 unified hierarchy.
func Unified() bool { return cgroups.Mode() == cgroups.Unified }

// New creates <Parent>/<id> with the limits. On error nothing of the
// group is left.
func New(id string, l Limits) (*Group, error) {
	path := PathOf(id)
	period := uint64(100000)
	quota := l.MilliCPUs * int64(period) / 1000
	swap := l.Memory
	res := &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: &l.Memory, Swap: &swap},
		CPU:    &specs.LinuxCPU{Quota: &quota, Period: &period},
		Pids:   &specs.LinuxPids{Limit: &l.Pids},
	}
	g := &Group{path: path, root: mountpoint}
	var err error
	if Unified() {
		if err := v2Controllers(); err != nil {
			return nil, fmt.Errorf("creating cgroup %s: %w", path, err)
		}
		g.v2, err = cgroup2.NewManager(mountpoint, path, cgroup2.ToResources(res))
	} else {
		g.v1, err = cgroup1.New(cgroup1.StaticPath(path), res, cgroup1.WithHierarchy(v1Subsystems))
	}
	if err != nil {
		err = swapAdvice(err)
		// The library creates a hierarchy's directory, then writes its
		// limits: a refused write leaves the directories made so far.
		ctx, cancel := context.WithTimeout(context.Background(), removeTimeout)
		defer cancel()
		if rerr := Remove(ctx, id); rerr != nil {
			return nil, fmt.Errorf("creating cgroup %s: %w (and removing what was created: %v)", path, err, rerr)
		}
		return nil, fmt.Errorf("creating cgroup %s: %w", path, err)
	}
	return g, nil
}

// swapFiles are the files that bound a group's swap, v1's and v2's.
var swapFiles = []string{"memory.memsw.limit_in_bytes", "memory.swap.max"}

// swapAdvice explains err, New's, when it is the write of a swap limit
// into a group that has no such file: the kernel accounts no swap (the
// write is refused with EACCES, which reads as a permission problem).
// Without swap accounting a memory limit could be passed by swapping, so
// New fails; the fix is the host's boot parameter. Call it before the
// group is removed.
func swapAdvice(err error) error {
	var pe *fs.PathError
	if !errors.As(err, &pe) || !slices.Contains(swapFiles, filepath.Base(pe.Path)) {
		return err
	}
	if _, serr := os.Stat(pe.Path); !errors.Is(serr, fs.ErrNotExist) {
		return err
	}
	return fmt.Errorf("this host's kernel accounts no swap in cgroups (%s does not exist), so a sandbox could pass its memory limit by swapping: boot the kernel with swapaccount=1 (add it to GRUB_CMDLINE_LINUX in /etc/default/grub, run update-grub and reboot): %w", pe.Path, err)
}

// limited are the controllers whose limits New sets. A group without one
// of them would hold no such limit, so New fails closed without it.
var limited = []cgroup1.Name{cgroup1.Memory, cgroup1.Cpu, cgroup1.Pids}

// v1Needed are the v1 controllers a group cannot do without, with what
// each is for: limited's, the freezer, through which KillAll stops a
// group from forking while it kills it, and cpuacct, from which Stats
// reads the CPU time. (v2 has cgroup.kill and cpu.stat in every group.)
var v1Needed = []struct {
	name cgroup1.Name
	role string
}{
	{cgroup1.Memory, "so a sandbox would run without its memory limit"},
	{cgroup1.Cpu, "so a sandbox would run without its cpu limit"},
	{cgroup1.Pids, "so a sandbox would run without its pids limit"},
	{cgroup1.Freezer, "so airlock could not stop a sandbox's processes from forking while it kills them"},
	{cgroup1.Cpuacct, "so airlock could not read a run's CPU time"},
}

// v1Subsystems limits a v1 group to the controllers airlock uses, so that a
// host without, say, net_prio still works, and refuses a host where a
// controller of v1Needed's is not a mounted hierarchy. cgroup1.Default
// leaves out a hierarchy that is not there, and keeps a directory left
// where one is not mounted (on /sys/fs/cgroup's tmpfs, where the limits
// would be written to plain files): either way New would succeed without
// the limit, or KillAll and Stats would fail on a group already running.
// An optional controller (devices, cpuset) that is not mounted is left
// out, rather than given plain directories on the tmpfs.
func v1Subsystems() ([]cgroup1.Subsystem, error) {
	all, err := cgroup1.Default()
	if err != nil {
		return nil, err
	}
	mounts, err := v1Mounts()
	if err != nil {
		return nil, err
	}
	var out []cgroup1.Subsystem
	have := map[cgroup1.Name]bool{}
	for _, s := range all {
		if p, ok := s.(interface{ Path(string) string }); ok {
			dir, err := filepath.EvalSymlinks(p.Path("/"))
			have[s.Name()] = err == nil && slices.Contains(mounts[string(s.Name())], dir)
		}
		switch s.Name() {
		case cgroup1.Memory, cgroup1.Cpu, cgroup1.Cpuacct, cgroup1.Pids, cgroup1.Freezer, cgroup1.Devices, cgroup1.Cpuset:
			if have[s.Name()] {
				out = append(out, s)
			}
		}
	}
	// Every one missing is named: hierarchies are often mounted in pairs
	// (cpu,cpuacct), and the fix is the same for each.
	var missing []error
	for _, c := range v1Needed {
		if !have[c.name] {
			missing = append(missing, fmt.Errorf("the cgroup v1 %s controller is not mounted at %s, %s; mount it there (systemd does at boot; memory may need the kernel parameter cgroup_enable=memory)",
				c.name, filepath.Join(mountpoint, string(c.name)), c.role))
		}
	}
	if err := errors.Join(missing...); err != nil {
		return nil, err
	}
	return out, nil
}

// v1Mounts maps each cgroup v1 controller to where its hierarchy is
// mounted, from /proc/self/mountinfo.
func v1Mounts() (map[string][]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("finding the cgroup v1 hierarchies: %w", err)
	}
	m := map[string][]string{}
	for line := range strings.SplitSeq(string(b), "\n") {
		// "id parent dev root mountpoint options [optional...] - fstype source superoptions"
		pre, post, ok := strings.Cut(line, " - ")
		f, p := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(p) < 3 || p[0] != "cgroup" {
			continue
		}
		for _, o := range strings.Split(p[2], ",") {
			m[o] = append(m[o], f[4])
		}
	}
	return m, nil
}

// v2Controllers refuses a unified hierarchy that does not offer every
// controller of limited's. cgroup2.NewManager fails without one too, when
// it enables it or writes its limit, but less plainly.
func v2Controllers() error {
	b, err := os.ReadFile(filepath.Join(mountpoint, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("reading the cgroup v2 controllers: %w", err)
	}
	have := strings.Fields(string(b))
	for _, c := range limited {
		if !slices.Contains(have, string(c)) {
			return fmt.Errorf("the cgroup v2 hierarchy at %s offers no %s controller, so a sandbox would run without its %s limit; boot without cgroup_disable=%s, and leave it on no cgroup v1 hierarchy",
				mountpoint, c, c, c)
		}
	}
	return nil
}

// PathOf is the path of run id's group, as a runtime spec's cgroupsPath.
func PathOf(id string) string { return filepath.Join(Parent, id) }

// Path is the group's path as a runtime spec's cgroupsPath.
func (g *Group) Path() string { return g.path }

// Stats reads the group's counters.
func (g *Group) Stats() (Stats, error) {
	local := false
	if g.v2 != nil {
		var err error
		if local, err = mountLocalEvents(); err != nil {
			return Stats{}, fmt.Errorf("reading cgroup %s: %w", g.path, err)
		}
	}
	return g.stats(local)
}

// mountLocalEvents is localEvents of the hierarchy at mountpoint, read
// once: a mount's options do not change under a running airlock, and
// Stats is on every run's path.
var mountLocalEvents = sync.OnceValues(func() (bool, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	return err == nil && localEvents(b, mountpoint), err
})

// stats is Stats; local says v2's memory.events counts only the group's
// own tasks (the hierarchy is mounted with memory_localevents).
func (g *Group) stats(local bool) (Stats, error) {
	var s Stats
	if g.v2 != nil {
		// The few files the counters need, as on v1: containerd's Stat
		// reads a missing file as zeros.
		dir := filepath.Join(g.root, g.path)
		ev, err := readKeys(filepath.Join(dir, "memory.events"))
		if err != nil {
			return s, fmt.Errorf("reading cgroup %s: %w", g.path, err)
		}
		cpu, err := readKeys(filepath.Join(dir, "cpu.stat"))
		if err != nil {
			return s, fmt.Errorf("reading cgroup %s: %w", g.path, err)
		}
		s.CPU = time.Duration(cpu["usage_usec"]) * time.Microsecond
		s.OOMKills = ev["oom_kill"]
		s.MemoryLimitHits = ev["max"]
		if local {
			// A kill in a child group the runtime made and removed (runc's,
			// a docker container's) is not counted here; the OOM at this
			// group's limit, the tightest, that led to it is.
			s.OOMKills = max(s.OOMKills, ev["oom"])
		}
		// memory.peak is Linux 5.19's; before it no peak is kept.
		s.MemoryPeak = readInt(filepath.Join(dir, "memory.peak"))
		s.PidsPeak = readInt(filepath.Join(dir, "pids.peak"))
		s.PidsLimitHits = readKey(filepath.Join(dir, "pids.events"), "max")
		return s, nil
	}
	// The few v1 files the counters need, rather than every controller's
	// statistics.
	mem := filepath.Join(mountpoint, "memory", g.path)
	var err error
	read := func(path string) uint64 {
		n, rerr := readUint(path)
		if rerr != nil && err == nil {
			err = fmt.Errorf("reading cgroup %s: %w", g.path, rerr)
		}
		return n
	}
	s.MemoryPeak = int64(read(filepath.Join(mem, "memory.max_usage_in_bytes")))
	s.MemoryLimitHits = read(filepath.Join(mem, "memory.failcnt"))
	// With memory+swap equal to memory, memsw trips first; it is absent
	// where swap accounting is off.
	if n, rerr := readUint(filepath.Join(mem, "memory.memsw.failcnt")); rerr == nil {
		s.MemoryLimitHits += n
	}
	s.OOMKills = readKey(filepath.Join(mem, "memory.oom_control"), "oom_kill")
	s.CPU = time.Duration(read(filepath.Join(mountpoint, "cpuacct", g.path, "cpuacct.usage")))
	if err != nil {
		return s, err
	}
	pids := filepath.Join(mountpoint, "pids", g.path)
	s.PidsPeak = readInt(filepath.Join(pids, "pids.peak"))
	s.PidsLimitHits = readKey(filepath.Join(pids, "pids.events"), "max")
	return s, nil
}

// MemoryInUse is the memory group id is charged with now (v2's
// memory.current, v1's memory.usage_in_bytes): the sandbox's memory, page
// cache included.
func MemoryInUse(id string) (int64, error) {
	f := filepath.Join(mountpoint, "memory", PathOf(id), "memory.usage_in_bytes")
	if Unified() {
		f = filepath.Join(mountpoint, PathOf(id), "memory.current")
	}
	n, err := readUint(f)
	if err != nil {
		return 0, fmt.Errorf("reading the memory of cgroup %s: %w", PathOf(id), err)
	}
	return int64(n), nil
}

// Empty reports whether no process is left in the group.
func (g *Group) Empty() (bool, error) {
	if g.v2 != nil {
		procs, err := g.v2.Procs(true)
		return len(procs) == 0, err
	}
	procs, err := g.v1.Processes(cgroup1.Pids, true)
	return len(procs) == 0, err
}

// KillAll kills every process in the group, daemons that double-forked
// away from the runtime included, and waits until the group is empty. On
// v1 a freeze that fails does not stop the kill: it is reported only if
// the group does not empty.
func (g *Group) KillAll(ctx context.Context) error {
	b := backoff{max: 10 * time.Millisecond}
	var freezeErr error
	for {
		if empty, err := g.Empty(); err != nil || empty {
			return err
		}
		ferr, err := g.killOnce()
		if ferr != nil {
			freezeErr = ferr
		}
		if err != nil {
			return errors.Join(err, freezeErr)
		}
		if err := b.wait(ctx); err != nil {
			return errors.Join(fmt.Errorf("cgroup %s still has processes: %w", g.path, err), freezeErr)
		}
	}
}

// backoff spaces polls 1, 2, 4… ms apart, up to max: a killed group
// usually empties within a few milliseconds.
type backoff struct{ d, max time.Duration }

func (b *backoff) wait(ctx context.Context) error {
	b.d = min(max(2*b.d, time.Millisecond), b.max)
	t := time.NewTimer(b.d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// killOnce sends SIGKILL to every process in the group once. A v1 freeze
// that fails outright is given apart, as freezeErr, after the kill.
func (g *Group) killOnce() (freezeErr, err error) {
	if g.v2 != nil {
		return nil, g.v2.Kill()
	}
	// Freeze so nothing can fork while the list is walked, then kill.
	// The freeze is awaited only for a moment: a task the freezer cannot
	// stop keeps the group FREEZING for ever (runc init in execve, waiting
	// for its frozen threads to die), and containerd's Freeze waits with
	// it. Unfrozen, the kill still lands; a child forked meanwhile is
	// found by the caller's next round.
	// A freeze that fails outright (New refuses a host without the
	// freezer, but a hierarchy can go from under a group) still kills,
	// unfrozen, with nothing to thaw.
	state := filepath.Join(mountpoint, "freezer", g.path, "freezer.state")
	if ferr := setFreezer(state, "FROZEN", freezeWait); ferr != nil && !errors.Is(ferr, errStillFreezing) {
		freezeErr = fmt.Errorf("freezing cgroup %s: %w", g.path, ferr)
	}
	procs, err := g.v1.Processes(cgroup1.Pids, true)
	for _, p := range procs {
		if perr := syscallKill(p.Pid); perr != nil && err == nil {
			err = perr
		}
	}
	if freezeErr != nil {
		return freezeErr, err
	}
	if terr := setFreezer(state, "THAWED", thawWait); err == nil {
		err = terr
	}
	return nil, err
}

// freezeWait is how long a kill waits for its group to freeze; thawWait
// for it to thaw, which only needs the kernel to walk the group.
const (
	freezeWait = 100 * time.Millisecond
	thawWait   = 5 * time.Second
)

var errStillFreezing = errors.New("still freezing")

// setFreezer writes want to a v1 freezer.state file and polls it until
// it reads so, for at most wait. A group in FREEZING past wait gives
// errStillFreezing.
func setFreezer(path, want string, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	b := backoff{max: 10 * time.Millisecond}
	for {
		if err := os.WriteFile(path, []byte(want), 0); err != nil {
			return err
		}
		state, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		got := string(bytes.TrimSpace(state))
		if got == want {
			return nil
		}
		if b.wait(ctx) != nil {
			if got == "FREEZING" {
				return errStillFreezing
			}
			return fmt.Errorf("%s reads %s, not %s", path, got, want)
		}
	}
}

// removeTimeout bounds a removal whose caller set no deadline: a task
// stuck in the kernel must not hang airlock forever.
const removeTimeout = 30 * time.Second

// Delete kills what is left and removes the group, with any child groups a
// runtime nested in it, from every hierarchy. A group whose last tasks are
// still exiting refuses removal (EBUSY) for a moment; Delete retries until
// ctx is done.
func (g *Group) Delete(ctx context.Context) error {
	return untilGone(ctx, func() error {
		dirs := dirsOf(g.path)
		if len(dirs) == 0 {
			return nil
		}
		if err := g.KillAll(ctx); err != nil {
			// A hierarchy went from under the group: kill by listing.
			killListed(g.path)
		}
		// Runtimes and dockerd also create the path in hierarchies airlock
		// does not manage (blkio, name=systemd, unified); they go too.
		return removeDirs(dirs)
	})
}

// untilGone retries step every 20 ms until it succeeds or ctx (or, when
// ctx has no deadline, removeTimeout) runs out, returning step's last error.
func untilGone(ctx context.Context, step func() error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, removeTimeout)
		defer cancel()
	}
	b := backoff{max: 20 * time.Millisecond}
	for {
		err := step()
		if err == nil {
			return nil
		}
		if b.wait(ctx) != nil {
			return err
		}
	}
}

// dirsOf lists the directories of path in every mounted hierarchy.
func dirsOf(path string) []string {
	dirs, _ := filepath.Glob(filepath.Join(mountpoint, "*", path))
	if fi, err := os.Stat(filepath.Join(mountpoint, path)); err == nil && fi.IsDir() {
		dirs = append(dirs, filepath.Join(mountpoint, path))
	}
	return dirs
}

// removeDirs removes each of dirs, deepest children first.
func removeDirs(dirs []string) error {
	var errs []error
	for _, d := range dirs {
		// Most groups have no children: one rmdir.
		if err := os.Remove(d); err == nil || errors.Is(err, fs.ErrNotExist) {
			continue
		}
		var tree []string
		filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				tree = append(tree, p)
			}
			return nil
		})
		// WalkDir lists parents before children: remove in reverse.
		for i := len(tree) - 1; i >= 0; i-- {
			if err := os.Remove(tree[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", tree[i], err))
				break
			}
		}
	}
	return errors.Join(errs...)
}

// killListed kills every task that a cgroup.procs file under path names,
// in every hierarchy.
func killListed(path string) {
	for _, d := range dirsOf(path) {
		filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range bytes.Fields(b) {
				if pid, err := strconv.Atoi(string(f)); err == nil && pid > 0 {
					syscallKill(pid)
				}
			}
			return nil
		})
	}
}

func readInt(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	return n
}

// readUint reads a file holding one unsigned number.
func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
}

// readKeys reads a file of "key value" lines, as memory.events.
func readKeys(path string) (map[string]uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]uint64{}
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			n, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("parsing %s: %w", path, err)
			}
			m[f[0]] = n
		}
	}
	return m, nil
}

// readKey reads "key value" lines, as in pids.events.
func readKey(path, key string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) == 2 && string(f[0]) == key {
			n, _ := strconv.ParseUint(string(f[1]), 10, 64)
			return n
		}
	}
	return 0
}

// Add moves a process into the group.
func (g *Group) Add(pid int) error {
	if g.v2 != nil {
		return g.v2.AddProc(uint64(pid))
	}
	return g.v1.Add(cgroup1.Process{Pid: pid})
}

// Remove kills every task in <Parent>/<id> and removes it with any child
// groups, on every hierarchy, retrying as Delete does. It reads the
// directories themselves rather than loading a group, so half a group (some
// hierarchies already gone) is removed too. A group that is not there is
// fine.
func Remove(ctx context.Context, id string) error {
	path := PathOf(id)
	return untilGone(ctx, func() error {
		killListed(path)
		return removeDirs(dirsOf(path))
	})
}

// Idle reports whether <Parent>/<id> holds no process in any hierarchy,
// its child groups included, and none of its directories was made less
// than age ago. The groups under Parent are the host's, shared by every
// airlock root on it: a group that is not idle may be another root's run,
// being made or running.
func Idle(id string, age time.Duration) bool {
	now := time.Now()
	idle := true
	for _, d := range dirsOf(PathOf(id)) {
		filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			switch {
			case err != nil || !idle:
				return nil
			case e.IsDir():
				if fi, err := e.Info(); err != nil || now.Sub(fi.ModTime()) < age {
					idle = false
				}
			case e.Name() == "cgroup.procs":
				if b, err := os.ReadFile(p); err != nil || len(bytes.TrimSpace(b)) > 0 {
					idle = false
				}
			}
			return nil
		})
	}
	return idle
}

// IDs lists the run ids that have a group under Parent in any hierarchy.
func IDs() []string {
	seen := map[string]bool{}
	dirs, _ := filepath.Glob(filepath.Join(mountpoint, "*", Parent, "*"))
	more, _ := filepath.Glob(filepath.Join(mountpoint, Parent, "*"))
	for _, d := range append(dirs, more...) {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			seen[filepath.Base(d)] = true
		}
	}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	return ids
}

// localEvents reports whether mountinfo shows the cgroup2 hierarchy at
// mount point at mounted with memory_localevents. Of mounts on one point
// the last is the one seen.
func localEvents(mountinfo []byte, at string) bool {
	local := false
	for line := range strings.SplitSeq(string(mountinfo), "\n") {
		// "id parent dev root mountpoint options [optional...] - fstype source superoptions"
		pre, post, ok := strings.Cut(line, " - ")
		f, p := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) >= 5 && len(p) >= 3 && p[0] == "cgroup2" && f[4] == at {
			local = slices.Contains(strings.Split(p[2], ","), "memory_localevents")
		}
	}
	return local
}
