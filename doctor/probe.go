package doctor

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
)

const (
	// probeTimeout is each probe sandbox's wall-clock limit.
	probeTimeout = 30 * time.Second
	// probeSetup bounds what comes before the program starts (unpacking
	// the image on a first run).
	probeSetup = time.Minute
	// The limits probe allocates hogBytes under a probeMemory limit.
	probeMemory = 64 << 20
	hogBytes    = 200 << 20
	// netHost is in TEST-NET-1 (RFC 5737): never routed, so only a sandbox
	// with a network could even try.
	netHost = "192.0.2.1"
	netPort = 80
)

var netTarget = fmt.Sprintf("%s:%d", netHost, netPort)

// probeScript prints key=value lines the doctor checks. Nothing it prints
// is shown verbatim.
var probeScript = fmt.Sprintf(`import errno, os, socket
def say(k, v): print(f"{k}={v}", flush=True)
def why(e): return errno.errorcode.get(e.errno, "E?") if e.errno else type(e).__name__
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.settimeout(3)
try:
    s.connect((%q, %d))
    say("net", "connected")
except OSError as e:
    say("net", why(e))
try:
    open("/.airlock-doctor", "w").close()
    say("root_write", "ok")
except OSError as e:
    say("root_write", why(e))
say("root_ro", int(bool(os.statvfs("/").f_flag & os.ST_RDONLY)))
for line in open("/proc/self/status"):
    k, _, v = line.partition(":")
    if k in ("CapEff", "NoNewPrivs"):
        say(k, v.strip())
say("uid", os.getuid())
`, netHost, netPort)

var hogScript = fmt.Sprintf(`a = []
for _ in range(%d): a.append(bytearray(8 << 20))
print("allocated", sum(map(len, a)))
`, hogBytes/(8<<20))

// probe runs one sandbox that tries what must fail, and one that passes
// its memory limit. failed is how many checks before it failed.
func probe(ctx context.Context, o Options, failed int) []Check {
	if o.Run == nil {
		return nil
	}
	if failed > 0 {
		return []Check{fail("probe", fmt.Sprintf("not run: %d check(s) above failed", failed),
			"fix those, then run `airlock doctor` again")}
	}
	mode := isolation.Mode(o.Isolation)
	run := func(argv []string, l isolation.Limits) (runner.Result, error) {
		l.Timeout = probeTimeout
		ctx, cancel := context.WithTimeout(ctx, probeTimeout+probeSetup)
		defer cancel()
		return o.Run(ctx, runner.Spec{Argv: argv, Policy: isolation.Policy{Isolation: mode, Limits: l}})
	}
	res, err := run([]string{"python3", "-c", probeScript}, isolation.Limits{})
	if err != nil {
		return []Check{fail("probe", "running the probe: "+err.Error(), runFix(o, err))}
	}
	if res.Reason != runner.ReasonExited || res.ExitCode != 0 {
		return []Check{fail("probe", ending(res), runFix(o, nil))}
	}
	out := sandboxChecks(parseProbe(string(res.Stdout.Head)))
	res, err = run([]string{"python3", "-c", hogScript}, isolation.Limits{Memory: probeMemory})
	return append(out, limitsCheck(o, res, err))
}

// runFix says what to do when a probe sandbox could not run.
func runFix(o Options, err error) string {
	if errdefs.IsNotFound(err) {
		return "run `make setup`, which builds the default image and puts it where the engine finds it"
	}
	return fmt.Sprintf("see what the engine does with `airlock --debug run --engine %s --isolation %s -- python3 -c 'print(1)'`", o.Engine, o.Isolation)
}

// ending describes a probe run that did not exit cleanly.
func ending(res runner.Result) string {
	s := fmt.Sprintf("the probe ended with reason %s, exit %d", res.Reason, res.ExitCode)
	if e := strings.TrimSpace(string(res.Stderr.Head)); e != "" {
		if len(e) > 300 {
			e = e[:300] + "…"
		}
		s += fmt.Sprintf("; stderr %q", e)
	}
	return s
}

// parseProbe reads the probe's key=value lines; later keys win.
func parseProbe(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, found := strings.Cut(strings.TrimSpace(line), "="); found {
			m[k] = v
		}
	}
	return m
}

// shown quotes a value from the sandbox unless it is plainly a word.
func shown(v string) string {
	if v != "" && strings.Trim(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") == "" {
		return v
	}
	return strconv.Quote(v)
}

const escapeFix = "do not run untrusted code on this host: the sandbox is not isolated as it must be; check the runsc and runc rows, and report it"

// sandboxChecks grades what the probe found inside the sandbox.
func sandboxChecks(m map[string]string) []Check {
	var out []Check

	const netName = "probe: no network"
	switch v, found := m["net"]; {
	case !found:
		out = append(out, fail(netName, "the probe printed no network result", escapeFix))
	case v == "connected":
		out = append(out, fail(netName, "connected to "+netTarget, escapeFix))
	case v != "ENETUNREACH":
		// Only loopback gives ENETUNREACH at once. A refusal, a host
		// unreachable or a timeout each mean the SYN left on a route.
		out = append(out, fail(netName, fmt.Sprintf("connecting to %s failed with %s, not ENETUNREACH: the sandbox has a route out", netTarget, shown(v)), escapeFix))
	default:
		out = append(out, ok(netName, fmt.Sprintf("connecting to %s failed: %s", netTarget, shown(v))))
	}

	const roName = "probe: read-only root"
	switch w, ro := m["root_write"], m["root_ro"]; {
	case w == "":
		out = append(out, fail(roName, "the probe printed no write result", escapeFix))
	case w == "ok":
		out = append(out, fail(roName, "the sandbox wrote a file in /", escapeFix))
	case ro != "1":
		out = append(out, fail(roName, fmt.Sprintf("/ is not mounted read-only (writing failed: %s)", shown(w)), escapeFix))
	default:
		out = append(out, ok(roName, fmt.Sprintf("/ is mounted read-only; writing failed: %s", shown(w))))
	}

	const capName = "probe: no capabilities"
	var wrong []string
	capEff, err := strconv.ParseUint(m["CapEff"], 16, 64)
	if err != nil || capEff != 0 {
		wrong = append(wrong, "CapEff is "+shown(m["CapEff"])+", want 0")
	}
	if m["NoNewPrivs"] != "1" {
		wrong = append(wrong, "NoNewPrivs is "+shown(m["NoNewPrivs"])+", want 1")
	}
	if uid, err := strconv.ParseUint(m["uid"], 10, 32); err != nil || uid == 0 {
		wrong = append(wrong, "uid is "+shown(m["uid"])+", want not 0")
	}
	if len(wrong) > 0 {
		out = append(out, fail(capName, strings.Join(wrong, "; "), escapeFix))
	} else {
		out = append(out, ok(capName, fmt.Sprintf("CapEff %s, NoNewPrivs 1, uid %s", m["CapEff"], m["uid"])))
	}
	return out
}

// limitsCheck grades the run that allocated past its memory limit.
func limitsCheck(o Options, res runner.Result, err error) Check {
	const name = "probe: limits enforced"
	what := fmt.Sprintf("allocating %s under a %s limit", human(hogBytes), human(probeMemory))
	if err != nil {
		return fail(name, what+": "+err.Error(), runFix(o, err))
	}
	if res.Reason != runner.ReasonOOM {
		return fail(name, fmt.Sprintf("%s ended with reason %s, exit %d", what, res.Reason, res.ExitCode),
			"do not rely on memory limits here: check the cgroups row (the memory controller), and that nothing else manages /airlock's cgroups")
	}
	d := what + " ended with reason oom"
	if p := res.Usage.MemoryPeakBytes; p > 0 {
		d += fmt.Sprintf(" (peak %s)", human(uint64(p)))
	}
	return ok(name, d)
}
