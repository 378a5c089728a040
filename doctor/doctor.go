// Package doctor checks whether a host can keep airlock's guarantees for an
// engine and isolation mode: root, the runtimes, cgroup controllers,
// seccomp, dockerd, free space, and a live probe that tries from inside a
// real sandbox what must fail there.
//
// A check FAILs only when the chosen engine and isolation mode need what
// is missing; what they do not need is a warning. The live probe runs only
// when nothing before it failed.
package doctor

import (
	"context"
	"fmt"
	"strings"

	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
)

// A check's Status is one of these.
const (
	StatusOK   = "ok"
	StatusWarn = "warn"
	StatusFail = "FAIL"
)

// Check is one row of the report.
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
	// Fix says what to do; set for every FAIL.
	Fix string `json:"fix"`
}

// Options say what to check.
type Options struct {
	// Root is airlock's state directory.
	Root string
	// Engine is "oci" or "docker": the caller resolves "auto" as runs do.
	Engine string
	// Isolation is "gvisor" or "seccomp"; empty means gvisor.
	Isolation string
	// Runsc is where airlock's runsc is installed.
	Runsc string
	// Agent is where the exec agent of gVisor sandboxes is installed.
	Agent string
	// DockerRuntime is the docker engine's check of dockerd (that it
	// answers and can apply every limit) and its runtime for a mode,
	// describing what it found; nil when there is no docker engine. An
	// error with a Fix() string method says its own fix.
	DockerRuntime func(context.Context, isolation.Mode) (string, error)
	// DockerRegistered returns dockerd's entry for the runtime the docker
	// engine runs gVisor under; nil when there is no docker engine.
	DockerRegistered func(context.Context) (RuntimeEntry, error)
	// RuntimeOwner is the root that runtime belongs to: Root, or the
	// default root for a root that registered none of its own.
	// RuntimeRunsc and RuntimeArgs are what the owner's registration must
	// hold: its runsc, and exactly the flags airlock writes for it.
	RuntimeOwner string
	RuntimeRunsc string
	RuntimeArgs  []string
	// RuntimeRecordErr is why the root's record of the runtime name its
	// docker engine runs under cannot be read, if it cannot: then no
	// docker engine runs on the root.
	RuntimeRecordErr error
	// Run runs the live probe's sandboxes on the chosen engine; nil leaves
	// the probe out.
	Run func(context.Context, runner.Spec) (runner.Result, error)
}

// RuntimeEntry is a runtime as dockerd has it registered.
type RuntimeEntry struct {
	Name string
	// Found is whether dockerd has a runtime of that name.
	Found bool
	Path  string
	Args  []string
}

// check is one host check. Each returns exactly one row.
type check func(context.Context, Options) Check

// hostChecks run in this order, before the probe.
var hostChecks = []check{
	checkRoot,
	checkRunsc,
	checkAgent,
	checkRunc,
	checkCgroups,
	checkSeccomp,
	checkDockerd,
	checkDockerRuntime,
	checkSpace,
	checkDefaultImage,
}

// Run runs every check in order and returns one row for each, then the
// probe's rows.
func Run(ctx context.Context, o Options) []Check {
	if o.Isolation == "" {
		o.Isolation = "gvisor"
	}
	var out []Check
	for _, c := range hostChecks {
		out = append(out, c(ctx, o))
	}
	return append(out, probe(ctx, o, failures(out))...)
}

// OK reports whether no check failed.
func OK(checks []Check) bool { return failures(checks) == 0 }

func failures(checks []Check) int {
	n := 0
	for _, c := range checks {
		if c.Status == StatusFail {
			n++
		}
	}
	return n
}

func ok(name, detail string) Check { return Check{Name: name, Status: StatusOK, Detail: detail} }

func fail(name, detail, fix string) Check {
	return Check{Name: name, Status: StatusFail, Detail: detail, Fix: fix}
}

// bad is a FAIL when the chosen engine and isolation need the thing, and
// a warning otherwise.
func bad(needed bool, name, detail, fix string) Check {
	c := fail(name, detail, fix)
	if !needed {
		c.Status = StatusWarn
	}
	return c
}

// onlyFor is said after a problem with what the chosen engine and
// isolation do not need: what does.
func onlyFor(needed bool, what string) string {
	if needed {
		return ""
	}
	return " (needed only for " + what + ")"
}

// human prints a byte count for people, to one decimal place.
func human(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	v := strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/float64(div)), ".0")
	return fmt.Sprintf("%s %ciB", v, "KMGTP"[exp])
}
