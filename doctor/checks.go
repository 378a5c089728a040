package doctor

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/internal/rootonly"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/seccomp"
)

const cgroupRoot = "/sys/fs/cgroup"

// controllers are the cgroup controllers every run's limits need;
// v1Controllers those a v1 host needs besides (v2 has freezing and CPU
// accounting built in): the oci engine refuses a host without them.
var (
	controllers   = []string{"memory", "pids", "cpu"}
	v1Controllers = []string{"freezer", "cpuacct"}
)

// Free space under the root: below these, images cannot be unpacked.
const (
	spaceWarn = 2 << 30
	spaceFail = 256 << 20
)

func checkRoot(_ context.Context, o Options) Check {
	if euid := os.Geteuid(); euid != 0 {
		return fail("root", fmt.Sprintf("euid %d; the oci engine (cgroups, runsc) and the output directory's tmpfs need root", euid),
			"run airlock as root, for example with sudo")
	}
	// Whoever can write airlock's root can put their own runsc, images
	// or sandbox state there. One not made yet is the free space row's.
	if o.Root != "" {
		var e *rootonly.Error
		if err := rootonly.Check(o.Root); errors.As(err, &e) {
			return fail("root", fmt.Sprintf("euid 0, but airlock's root directory %s is not root's alone: %v", o.Root, e), e.Fix())
		}
	}
	return ok("root", "euid 0")
}

func checkRunsc(ctx context.Context, o Options) Check {
	const name = "runsc"
	path := o.Runsc
	// The oci engine refuses to start without it, whatever the mode.
	needed := o.Engine == "oci" || o.Isolation == string(isolation.GVisor)
	fix := "run `make setup`, which installs airlock's pinned runsc at " + path
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return bad(needed, name, "not installed at "+path, fix)
	case err != nil:
		return bad(needed, name, err.Error(), fix)
	case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0:
		return bad(needed, name, fmt.Sprintf("%s is not an executable file (mode %v)", path, fi.Mode()), fix)
	}
	// The oci engine runs it as root; not even its version is asked.
	if detail, fix, unsafe := unsafeRunsc(path); unsafe {
		return bad(needed, name, detail, fix)
	}
	v, err := engine.BinaryVersion(ctx, path, "")
	if err != nil {
		return bad(needed, name, err.Error(), fix)
	}
	return ok(name, fmt.Sprintf("%s: %s; platform %s", path, v, platform()))
}

// unsafeRunsc says whether a user other than root can change the runsc
// at path, or put another in its place, and if so what and how to fix it.
func unsafeRunsc(path string) (detail, fix string, unsafe bool) {
	err := rootonly.Check(path)
	var e *rootonly.Error
	switch {
	case errors.As(err, &e):
		return fmt.Sprintf("%v: whoever can change it runs code as root", e), e.Fix(), true
	case err != nil:
		return fmt.Sprintf("checking who can change %s: %v", path, err), "run `make setup`, which installs airlock's runsc at " + path, true
	}
	return "", "", false
}

// checkAgent warns only: without the agent, execs into long-lived gVisor
// sandboxes start through the control socket, isolated the same way but
// slower.
func checkAgent(_ context.Context, o Options) Check {
	const name = "exec agent"
	if o.Engine != "oci" || o.Isolation != string(isolation.GVisor) {
		return ok(name, "used only by the oci engine under gvisor")
	}
	fi, err := os.Stat(o.Agent)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return bad(false, name, fmt.Sprintf("no executable at %s: execs into long-lived sandboxes start through runsc's control socket, about twice as slow", o.Agent),
			"run `make setup`, which installs it")
	}
	return ok(name, o.Agent)
}

// platform is the gVisor platform airlock's runs use. airlock passes no
// --platform, so runsc uses its default.
func platform() string {
	if _, err := os.Stat("/dev/kvm"); err == nil {
		return "systrap (default; /dev/kvm is available, but airlock uses the default)"
	}
	return "systrap (default)"
}

func checkRunc(ctx context.Context, o Options) Check {
	const name = "runc"
	// Only the oci engine's seccomp mode runs the runc on PATH; dockerd
	// brings its own.
	needed := o.Engine == "oci" && o.Isolation == string(isolation.Seccomp)
	fix := "install runc (`make setup` does), or use --isolation gvisor"
	path, err := exec.LookPath("runc")
	if err != nil {
		return bad(needed, name, "not on PATH; --isolation seccomp on the oci engine runs it", fix)
	}
	v, err := engine.BinaryVersion(ctx, path, "")
	if err != nil {
		return bad(needed, name, err.Error(), fix)
	}
	return ok(name, path+": "+v)
}

func checkCgroups(context.Context, Options) Check {
	const name = "cgroups"
	mode := cgroups.Mode()
	var have func(string) bool
	var ver, fix string
	switch mode {
	case cgroups.Unified:
		ver = "v2 (unified)"
		b, _ := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.controllers"))
		listed := strings.Fields(string(b))
		have = func(c string) bool { return slices.Contains(listed, c) }
		fix = "boot without cgroup_disable= for the missing controllers, and leave none of them on a cgroup v1 hierarchy"
	case cgroups.Legacy, cgroups.Hybrid:
		ver = "v1 (legacy)"
		if mode == cgroups.Hybrid {
			ver = "v1 (hybrid)"
		}
		have = func(c string) bool { return isCgroupFS(filepath.Join(cgroupRoot, c)) }
		fix = "mount the missing controllers under " + cgroupRoot + " (memory may need the kernel parameter cgroup_enable=memory)"
	default:
		return fail(name, "no cgroup hierarchy at "+cgroupRoot, "mount cgroup2 at "+cgroupRoot+" (systemd does this at boot)")
	}
	need := controllers
	if mode != cgroups.Unified {
		need = append(slices.Clone(controllers), v1Controllers...)
	}
	if missing := missingControllers(need, have); len(missing) > 0 {
		return fail(name, fmt.Sprintf("%s; missing controllers: %s", ver, strings.Join(missing, ", ")), fix)
	}
	if !swapAccounted(mode == cgroups.Unified) {
		return fail(name, ver+"; the kernel accounts no swap in cgroups, so a memory limit could be passed by swapping (airlock refuses to run)",
			"boot the kernel with swapaccount=1: add it to GRUB_CMDLINE_LINUX in /etc/default/grub, run update-grub and reboot")
	}
	return ok(name, fmt.Sprintf("%s; controllers %s available", ver, strings.Join(need, ", ")))
}

// swapAccounted reports whether memory groups bound swap: v1's memory
// hierarchy has memory.memsw.*, and v2's groups memory.swap.max (the
// root has none, so its children are asked; with no child holding the
// memory controller yet, nothing says otherwise).
func swapAccounted(unified bool) bool {
	if !unified {
		_, err := os.Stat(filepath.Join(cgroupRoot, "memory", "memory.memsw.limit_in_bytes"))
		return err == nil
	}
	limited, _ := filepath.Glob(filepath.Join(cgroupRoot, "*", "memory.max"))
	swap, _ := filepath.Glob(filepath.Join(cgroupRoot, "*", "memory.swap.max"))
	return len(limited) == 0 || len(swap) > 0
}

func missingControllers(need []string, have func(string) bool) []string {
	var missing []string
	for _, c := range need {
		if !have(c) {
			missing = append(missing, c)
		}
	}
	return missing
}

func checkSeccomp(_ context.Context, o Options) Check {
	const name = "seccomp"
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return fail(name, err.Error(), "mount /proc")
	}
	if !hasField(status, "Seccomp") {
		return fail(name, "the kernel has no seccomp support (no Seccomp: line in /proc/self/status)",
			"use a kernel built with CONFIG_SECCOMP and CONFIG_SECCOMP_FILTER")
	}
	// Every run carries the default profile, chosen and compiled as the
	// runner does.
	p, err := runner.Profile(nil, isolation.Mode(o.Isolation))
	switch {
	case errors.Is(err, seccomp.ErrNotSupported):
		return fail(name, "the kernel supports it, but this airlock was built without cgo, so it cannot compile a profile",
			"install libseccomp-dev and rebuild with CGO_ENABLED=1 (`make build`)")
	case err != nil:
		return fail(name, "the default profile does not compile: "+err.Error(),
			"update libseccomp (`make setup` installs it) and rebuild airlock")
	}
	return ok(name, fmt.Sprintf("kernel supports it; the default profile compiles with libseccomp (sha256 %.12s…)", p.SHA256()))
}

// hasField reports whether a /proc status file has a "key:" line.
func hasField(status []byte, key string) bool {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		if k, _, found := strings.Cut(sc.Text(), ":"); found && k == key {
			return true
		}
	}
	return false
}

func checkDockerd(ctx context.Context, o Options) Check {
	const name = "dockerd"
	needed := o.Engine == "docker"
	only := onlyFor(needed, "--engine docker")
	if o.DockerRuntime == nil && o.RuntimeRecordErr != nil {
		// The docker runtime row fails, with the fix.
		return bad(false, name, "not checked: the docker engine cannot start on this root, whose runtime record is damaged (see the docker runtime row)", recordFix(o))
	}
	if o.DockerRuntime == nil {
		return bad(needed, name, "not checked: no docker engine given"+only, "run `airlock doctor`, which checks it")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// The docker engine's own check, as every run on it makes.
	detail, err := o.DockerRuntime(ctx, isolation.Mode(o.Isolation))
	if err != nil {
		fix := "start dockerd and register airlock's runsc with it: `make setup` does both"
		var f fixer
		switch {
		case errors.As(err, &f):
			fix = f.Fix()
		case errors.Is(err, fs.ErrPermission):
			fix = "run airlock as root (or as a member of the docker group)"
		}
		return bad(needed, name, err.Error()+only, fix)
	}
	return ok(name, detail)
}

// fixer is an error that says how to fix what it reports, as the docker
// engine's refusal of a dockerd that would drop airlock's limits does.
type fixer interface{ Fix() string }

func checkSpace(_ context.Context, o Options) Check {
	free, err := engine.FreeBytes(o.Root)
	if err != nil {
		return fail("free space", err.Error(), "create airlock's root with `make setup`, or pass --root")
	}
	return spaceCheck(o.Root, free)
}

// spaceCheck is the row for free bytes under root.
func spaceCheck(root string, free uint64) Check {
	c := Check{Name: "free space", Status: spaceStatus(free), Detail: fmt.Sprintf("%s free in %s", human(free), root)}
	switch c.Status {
	case StatusFail:
		c.Detail += " (under " + human(spaceFail) + ")"
	case StatusWarn:
		c.Detail += " (under " + human(spaceWarn) + ")"
	}
	if c.Status != StatusOK {
		c.Fix = "free space on the filesystem that holds " + root + " (images are unpacked there), or move it with --root"
	}
	return c
}

// spaceStatus grades the free bytes under the root.
func spaceStatus(free uint64) string {
	switch {
	case free < spaceFail:
		return StatusFail
	case free < spaceWarn:
		return StatusWarn
	}
	return StatusOK
}

func checkDefaultImage(_ context.Context, o Options) Check {
	const name = "default image"
	_, ref, err := images.OpenIndex(filepath.Join(o.Root, "images")).Default()
	if err != nil {
		return fail(name, err.Error(), "run `make setup`, which builds the default image")
	}
	return ok(name, ref.String())
}
