package doctor

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/isolation"
)

// checkDockerRuntime checks dockerd's registration of airlock's runsc
// against the root it belongs to: registered, running that root's runsc,
// which exists, with exactly the flags airlock writes. A registration
// another root re-pointed at its own runsc would otherwise pass every run's
// check, and fail only once that root is gone.
func checkDockerRuntime(ctx context.Context, o Options) Check {
	const name = "docker runtime"
	needed := o.Engine == "docker" && o.Isolation == string(isolation.GVisor)
	only := onlyFor(needed, "--engine docker --isolation gvisor")
	if err := o.RuntimeRecordErr; err != nil {
		// Every docker run on this root would fail, whatever its mode.
		return bad(o.Engine == "docker", name, err.Error()+onlyFor(o.Engine == "docker", "--engine docker"), recordFix(o))
	}
	if o.DockerRegistered == nil {
		return bad(needed, name, "not checked: no docker engine given"+only, "run `airlock doctor`, which checks it")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	e, err := o.DockerRegistered(ctx)
	if err != nil {
		return bad(needed, name, "not checked: "+err.Error()+only, "start dockerd (`make setup` does)")
	}
	return runtimeCheck(needed, e, o, only)
}

// recordFix says how to mend a root's record of its runtime name.
func recordFix(o Options) string {
	return fmt.Sprintf("register this root's runsc again under a name, which rewrites the record: `airlock --root %s host install-runtime --runsc %s --name NAME`, then SIGHUP dockerd", o.Root, o.Runsc)
}

// runtimeCheck grades dockerd's entry e; only is appended to a problem's
// detail when the mode checked does not need the runtime.
func runtimeCheck(needed bool, e RuntimeEntry, o Options, only string) Check {
	const name = "docker runtime"
	owner := "this root's"
	if o.RuntimeOwner != o.Root {
		owner = fmt.Sprintf("the default root's (%s has registered none of its own)", o.Root)
	}
	fix := fmt.Sprintf("register it with `airlock --root %s host install-runtime --runsc %s`, then SIGHUP dockerd (install.sh and `make setup` do both)", o.RuntimeOwner, o.RuntimeRunsc)
	if !e.Found {
		return bad(needed, name, fmt.Sprintf("dockerd has no runtime %q, %s runsc%s", e.Name, owner, only), fix)
	}
	if e.Path != o.RuntimeRunsc && !sameFile(e.Path, o.RuntimeRunsc) {
		return bad(needed, name, fmt.Sprintf("runtime %q runs %s, not %s runsc %s: another installation registered it%s", e.Name, e.Path, owner, o.RuntimeRunsc, only),
			fix+"; if another root must keep that name, give this one its own with --name NAME")
	}
	fi, err := os.Stat(e.Path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		what := "is not an executable file"
		if os.IsNotExist(err) {
			what = "does not exist"
		}
		return bad(needed, name, fmt.Sprintf("runtime %q runs %s, which %s: every gVisor run on dockerd would fail%s", e.Name, e.Path, what, only),
			"install runsc there again (`make setup`, or the bundle's install.sh)")
	}
	// dockerd runs it as root for every container.
	if detail, fix, unsafe := unsafeRunsc(e.Path); unsafe {
		return bad(needed, name, fmt.Sprintf("runtime %q runs %s: %s%s", e.Name, e.Path, detail, only), fix)
	}
	if !slices.Equal(e.Args, o.RuntimeArgs) {
		return bad(needed, name, fmt.Sprintf("runtime %q has flags %q, not the ones airlock writes for %s: %q%s", e.Name, e.Args, o.RuntimeOwner, o.RuntimeArgs, only), fix)
	}
	d := fmt.Sprintf("runtime %q: %s %s", e.Name, e.Path, strings.Join(e.Args, " "))
	if o.RuntimeOwner != o.Root {
		d += " (the default root's; this root has registered none of its own)"
	}
	return ok(name, d)
}

// sameFile reports whether a and b name one existing file.
func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}
