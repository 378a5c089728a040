//go:build e2e

package e2e

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/runner"
)

// advExec runs `airlock exec --json FLAGS… ID -- ARGV…`.
func advExec(env []string, id string, flags []string, argv ...string) advRun {
	return advJSON(env, append(append(append([]string{"exec", "--json"}, flags...), id, "--"), argv...)...)
}

// homeList prints what is in the working directory, the workspace.
const homeList = `echo "home:$(ls -A | tr '\n' ' ')"
`

// TestAdversarialExec runs the adversarial suite's network, filesystem,
// privilege and secrets groups through `airlock exec` in a long-lived
// sandbox, with the outcomes TestAdversarial expects of `airlock run`
// except where advCases says why a live sandbox differs (advRuns.live).
//
// State kept between execs is what a long-lived sandbox changes, so the
// after script is a second exec of the probe's own sandbox, which must
// find what the probe left, and a second live sandbox, whose detached
// listener is the probe's other_sandbox target, must find none of it.
// Both sandboxes are then removed, and nothing of them, the detached
// listener included, may be left.
func TestAdversarialExec(t *testing.T) {
	h := newAdvHost(t)
	probe, err := os.ReadFile("testdata/adversarial/probe.py")
	if err != nil {
		t.Fatal(err)
	}
	base := sandboxes() // what was on the host before is not this test's
	start := time.Now()
	// The secret is in airlock's environment when each sandbox (and its
	// init) is made, and at every exec.
	secret := []string{"AIRLOCK_E2E_SECRET=" + h.secret}
	a, b := sbCreateEnv(t, secret), sbCreateEnv(t, secret)
	t.Cleanup(func() { airlock(nil, "sandbox", "rm", a.ID, b.ID) })
	r := &advRuns{live: true, peer: &advPeer{}}
	took := []string{fmt.Sprintf("create ×2 %.1fs", time.Since(start).Seconds())}
	step := func(name string, f func()) {
		s := time.Now()
		f()
		took = append(took, fmt.Sprintf("%s %.1fs", name, time.Since(s).Seconds()))
	}

	// The peer: a detached listener in b, logging to b's workspace. The
	// marker in its command line finds it among the host's processes.
	marker := "airlock-e2e-peer-" + rand.Text()
	step("peer", func() {
		started := advExec(secret, b.ID, []string{"--detach"}, "sh", "-c", `exec python3 -c "$1" "$2" "$3" >peer.log 2>&1`,
			"sh", peerScript, strconv.Itoa(peerPort), marker)
		ready := advExec(secret, b.ID, nil, "sh", "-c",
			`for i in $(seq 300); do grep -qx listening peer.log 2>/dev/null && exit 0; sleep 0.1; done; cat peer.log; exit 1`)
		if err := errors.Join(started.ended(runner.ReasonExited, 0), ready.ended(runner.ReasonExited, 0)); err != nil {
			r.peer.err = fmt.Errorf("the peer sandbox's listener did not start: %w", err)
		}
	})
	step("probe", func() {
		r.probe = advExec(secret, a.ID, []string{"--env", "GIVEN=yes", "--timeout", "60s"}, "python3", "-c", string(probe),
			strconv.Itoa(h.port()), h.abstractName, h.sockPath, strconv.Itoa(os.Getpid()), h.file, strconv.Itoa(peerPort))
	})
	step("peer log", func() {
		log := advExec(secret, b.ID, nil, "cat", "peer.log")
		if err := log.ended(runner.ReasonExited, 0); err != nil {
			r.peer.err = errors.Join(r.peer.err, err)
		} else if rest, ok := bytes.CutPrefix(log.res.Stdout.Head, []byte("listening\n")); !ok {
			r.peer.err = errors.Join(r.peer.err, fmt.Errorf("the peer's log: %q", log.res.Stdout.Head))
		} else {
			r.peer.rest = rest
		}
	})
	// "pee[r]" matches the marker but not grep's own command line.
	peerCount := fmt.Sprintf(`echo "peer:$(grep -l '%s' /proc/[0-9]*/cmdline 2>/dev/null | wc -l)"`,
		strings.Replace(marker, "peer", "pee[r]", 1))
	step("other", func() { r.other = advExec(secret, b.ID, nil, "sh", "-c", homeList+listScript+peerCount) })
	step("after", func() { r.after = advExec(secret, a.ID, nil, "sh", "-c", homeList+liveAfterScript()) })
	step("next", func() { r.next = advExec(secret, a.ID, nil, "echo", "next") })
	r.parseProbe()

	// Under runc the detached listener is a host process in b's pid
	// namespace; under gVisor the sentry runs it, out of the host's sight.
	var peerOnHost []string
	if isolationName == "seccomp" {
		peerOnHost = hostProcs(marker)
	}
	var rm cliResult
	var left []string
	step("rm", func() {
		rm = airlock(nil, "sandbox", "rm", a.ID, b.ID)
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			left = append(notIn(append(sbGone(a.ID), sbGone(b.ID)...), base), hostProcs(marker)...)
			if len(left) == 0 || time.Now().After(deadline) {
				break
			}
		}
	})
	t.Logf("%s, %s: %s", a.ID, b.ID, strings.Join(took, ", "))
	t.Logf("the probe's sandbox after it: %q (%s %s, exit %d), then %s %s, exit %d; the other: %q", r.after.res.Stdout.Head,
		r.after.res.Reason, r.after.res.ErrorKind, r.after.cli.code, r.next.res.Reason, r.next.res.ErrorKind, r.next.cli.code, r.other.res.Stdout.Head)

	if err := r.probeDone(); err != nil {
		t.Error(err)
	}
	if r.probe.res.SandboxID != a.ID || r.other.res.SandboxID != b.ID {
		t.Errorf("execs report sandbox_id %q and %q, want %s and %s", r.probe.res.SandboxID, r.other.res.SandboxID, a.ID, b.ID)
	}
	cases := advGroups(t, advCases(h, r), "network", "filesystem", "privilege", "secrets")
	// What only a long-lived sandbox has: a workspace, a detached process
	// and a removal.
	cases = append(cases,
		advCase{"filesystem", "workspace_private", "another sandbox's workspace unseen", layerAirlock, func() error {
			mine, err := listing(r.other, "home:")
			if err != nil || !slices.Contains(strings.Fields(mine), "peer.log") {
				return errors.Join(err, fmt.Errorf("the peer's workspace: %q, want its peer.log", mine))
			}
			theirs, err := listing(r.after, "home:")
			if err != nil || strings.Contains(theirs, "peer.log") {
				return errors.Join(err, fmt.Errorf("the probe's workspace: %q, without the peer's peer.log", theirs))
			}
			return nil
		}},
		advCase{"lifecycle", "detached_ends_with_rm", "lived until sandbox rm, then gone", layerAirlock, func() error {
			if n, err := listing(r.other, "peer:"); err != nil || n != "1" {
				return errors.Join(err, fmt.Errorf("%q processes of the detached listener in its sandbox, want 1", n))
			}
			if isolationName == "seccomp" && len(peerOnHost) != 1 {
				return fmt.Errorf("before rm, the host saw the detached listener as %v, want 1 process", peerOnHost)
			}
			if p := hostProcs(marker); len(p) > 0 {
				return fmt.Errorf("the detached listener survived sandbox rm: %v", p)
			}
			return nil
		}},
		advCase{"lifecycle", "rm_leaves_nothing", "no container, cgroup, mount, area, record or process", layerAirlock, func() error {
			if rm.code != 0 {
				return fmt.Errorf("sandbox rm: exit %d: %s", rm.code, rm.stderr)
			}
			if len(left) > 0 {
				return fmt.Errorf("left behind: %v", left)
			}
			return nil
		}},
	)
	advReport(t, " through airlock exec in a long-lived sandbox", cases)
}
