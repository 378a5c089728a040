//go:build e2e

package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/runner"
)

// leakScript is a hostile job for pooled sandboxes, run with $RUN set. It
// first looks for anything an earlier claim left (lines SEEN, SEENPROC,
// SEENENV and the listings of its fresh areas) in one scan of the whole
// tree, which also finds the directories it may write; then it leaves:
// a marker in every directory it may write, login files that export
// AIRLOCK_INJECTED, and background processes that keep writing markers
// (setsid, nohup, a double fork). It ends by looking again, as MINE, to
// prove the look finds what was left. The pattern of the background
// processes' names is split, so that the script's own command line, seen
// in /proc by its subshells, never matches it.
const leakScript = `bg=airlock-bg
procs() {
  for f in /proc/[0-9]*/cmdline; do
    c=$(tr '\0' ' ' <"$f" 2>/dev/null)
    case "$c" in *"$bg"-*) echo "$1PROC $c";; esac
  done
  echo "$1ENV $(bash -lc 'echo ${AIRLOCK_INJECTED:-}' </dev/null 2>/dev/null)"
}
echo "WHO $(id -u) $(cat /proc/sys/kernel/hostname) $(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
echo "FRESH /tmp:$(ls -A /tmp | tr '\n' ' ') /dev/shm:$(ls -A /dev/shm | tr '\n' ' ') out:$(ls -A /out 2>/dev/null | tr '\n' ' ')"
scan=$(find / \( -path /proc -o -path /sys \) -prune -o -name 'airlock-marker-*' -printf 'SEEN %p\n' -o -type d -writable -printf 'W %p\n' 2>/dev/null)
echo "$scan" | grep '^SEEN '
procs SEEN
dirs=$(echo "$scan" | sed -n 's/^W //p')
for d in $dirs; do
  echo "$RUN" >"$d/airlock-marker-$RUN" 2>/dev/null && echo "PLANTED $d"
done
for f in .profile .bashrc .bash_profile .bash_login; do echo "export AIRLOCK_INJECTED=$RUN" >>"$HOME/$f"; done
(echo evil >/proc/sys/kernel/hostname) 2>/dev/null && echo "HOSTNAME CHANGED"
setsid sh -c 'while :; do echo x >/tmp/airlock-marker-bg-$0; echo x >/dev/shm/airlock-marker-bg-$0; sleep 0.2; done' "$bg-setsid-$RUN" </dev/null >/dev/null 2>&1 &
nohup sh -c 'while :; do sleep 1; done' "$bg-nohup-$RUN" </dev/null >/dev/null 2>&1 &
(sh -c 'while :; do sleep 1; done' "$bg-dfork-$RUN" </dev/null >/dev/null 2>&1 &)
while [ ! -e "/tmp/airlock-marker-bg-$bg-setsid-$RUN" ]; do sleep 0.05; done
find $dirs -maxdepth 1 -name 'airlock-marker-*' | sed 's/^/MINE /'
procs MINE
echo END`

// leakReport is what leakScript printed, by kind of line.
type leakReport struct {
	who, fresh, seenEnv, mineEnv   string
	seen, seenProc, mine, mineProc []string
	planted                        []string
	hostnameChanged, ended         bool
}

func parseLeak(out string) leakReport {
	var r leakReport
	for _, l := range strings.Split(out, "\n") {
		kind, rest, _ := strings.Cut(l, " ")
		switch kind {
		case "WHO":
			if r.who == "" {
				r.who = rest
			}
		case "FRESH":
			r.fresh = rest
		case "SEEN":
			r.seen = append(r.seen, rest)
		case "SEENPROC":
			r.seenProc = append(r.seenProc, rest)
		case "SEENENV":
			r.seenEnv = rest
		case "MINE":
			r.mine = append(r.mine, rest)
		case "MINEPROC":
			r.mineProc = append(r.mineProc, rest)
		case "MINEENV":
			r.mineEnv = rest
		case "PLANTED":
			r.planted = append(r.planted, rest)
		case "HOSTNAME":
			r.hostnameChanged = true
		case "END":
			r.ended = true
		}
	}
	return r
}

// check says what is wrong with a report of run, which must have seen
// nothing of another claim's and must have found its own leftovers.
func (r leakReport) check(run string, areas ...string) error {
	var bad []string
	if !r.ended {
		bad = append(bad, "the script did not finish")
	}
	if len(r.seen)+len(r.seenProc) > 0 || r.seenEnv != "" {
		bad = append(bad, fmt.Sprintf("saw another claim's leftovers: files %v, processes %v, env %q", r.seen, r.seenProc, r.seenEnv))
	}
	if r.fresh != "/tmp: /dev/shm: out:" {
		bad = append(bad, fmt.Sprintf("its areas were not empty at the start: %s", r.fresh))
	}
	if r.hostnameChanged {
		bad = append(bad, "it changed its hostname")
	}
	if f := strings.Fields(r.who); len(f) < 2 || f[0] != "65534" || f[1] != "sandbox" {
		bad = append(bad, fmt.Sprintf("uid and hostname %q, want 65534 sandbox", r.who))
	}
	for _, a := range areas {
		if !slices.Contains(r.planted, a) {
			bad = append(bad, fmt.Sprintf("planted nothing in %s (planted in %v)", a, r.planted))
		}
	}
	// The look itself works: it finds this run's own markers, processes
	// and login files.
	if !slices.Contains(r.mine, "/tmp/airlock-marker-"+run) || !slices.Contains(r.mine, "/tmp/airlock-marker-bg-airlock-bg-setsid-"+run) {
		bad = append(bad, fmt.Sprintf("the look missed its own markers: %v", r.mine))
	}
	if len(r.mineProc) < 3 || r.mineEnv != run {
		bad = append(bad, fmt.Sprintf("the look missed its own processes or env: %v, %q", r.mineProc, r.mineEnv))
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s", strings.Join(bad, "; "))
	}
	return nil
}

// waitHost polls until none of the host's processes has s in its command
// line.
func waitHost(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		left := hostProcs(s)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60s the host still runs processes naming %q: %v", s, left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// hostProcs lists the host's processes whose command line holds s.
func hostProcs(s string) []string {
	var found []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(s)) {
			found = append(found, filepath.Base(filepath.Dir(p))+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}

// poolServer makes template name and starts a server with a warm pool of
// size for it, full; ok is false on an engine that keeps no pool (whose
// refusal poolable checks).
func poolServer(t *testing.T, name string, size int) (s *srv, a api, pooled []string, ok bool) {
	t.Helper()
	if !poolable(t) {
		return nil, api{}, nil, false
	}
	poolTemplate(t, name)
	s = startServer(t, "--pool", fmt.Sprintf("%s=%d", name, size))
	a = s.apis()[0]
	return s, a, a.waitPooled(t, "full", atLeast(size)), true
}

// TestServePoolCrossClaim: six pooled runs (a pool of two, refilled
// three times over), each a hostile job that leaves files in every place
// it may write, login files that export a variable and background
// processes (setsid, nohup, double fork), and each finds nothing of the
// earlier ones: fresh /tmp, /dev/shm and /out,
// no marker anywhere, no process, no variable; distinct ids; the
// hostname is the policy's; under gVisor each has a kernel (boot id) of
// its own. No background process outlives its run on the host.
func TestServePoolCrossClaim(t *testing.T) {
	_, a, _, ok := poolServer(t, "e2e-pool-leak", 2)
	if !ok {
		return
	}
	ids, boots := map[string]bool{}, map[string]bool{}
	for i := range 6 {
		a.waitPooled(t, "refilled", atLeast(1))
		run := fmt.Sprintf("r%d", i)
		var res runner.Result
		a.call(t, "POST", "/v1/runs", map[string]any{"template": "e2e-pool-leak", "env": []string{"RUN=" + run}, "argv": []string{"sh", "-c", leakScript}}, http.StatusOK, &res)
		rep := parseLeak(string(res.Stdout.Head))
		if res.Reason != runner.ReasonExited || res.ExitCode != 0 || res.Pool != "e2e-pool-leak" {
			t.Fatalf("run %d: %s exit %d pool %q: %s\n%s", i, res.Reason, res.ExitCode, res.Pool, res.Stdout.Head, res.Stderr.Head)
		}
		if err := rep.check(run, "/tmp", "/dev/shm", "/out"); err != nil {
			t.Fatalf("run %d (%s): %v\nstdout:\n%s", i, res.ID, err, res.Stdout.Head)
		}
		if i == 0 {
			t.Logf("a pooled run may write in %v", rep.planted)
		}
		if ids[res.ID] {
			t.Fatalf("run %d reused sandbox id %s", i, res.ID)
		}
		ids[res.ID] = true
		if isolationName == "gvisor" {
			boot := strings.Fields(rep.who)[2]
			if boots[boot] {
				t.Fatalf("run %d shares its sandbox kernel (boot id %s) with an earlier run", i, boot)
			}
			boots[boot] = true
		}
	}
	// Under runc the background processes are the host's: each went with
	// its run's sandbox.
	waitHost(t, "airlock-bg-")
}

// TestServePoolSiblings: a pooled run cannot see, signal or read the
// processes of another pooled run in progress or of the sandboxes
// waiting in the pool. The attacker scans every pid up to 4096 (its own
// child proves the scan sees what it can reach), and kills what it finds;
// the sibling run ends on its own, and the waiting sandboxes still serve.
func TestServePoolSiblings(t *testing.T) {
	_, a, waiting, ok := poolServer(t, "e2e-pool-sib", 4)
	if !ok {
		return
	}
	var wg sync.WaitGroup
	var victim runner.Result
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.call(t, "POST", "/v1/runs", map[string]any{"template": "e2e-pool-sib",
			"argv": []string{"sh", "-c", `echo alive >/tmp/v; sleep 8; cat /tmp/v`, "airlock-victim"}}, http.StatusOK, &victim)
	}()
	a.waitPooled(t, "claimed once", func(ids []string) bool { return len(ids) == 3 })
	attack := `sleep 300 & child=$!
p=2
while [ $p -le 4096 ]; do
  if [ $p != $$ ] && kill -0 $p 2>/dev/null; then
    echo "ALIVE $p $(tr '\0' ' ' </proc/$p/cmdline 2>/dev/null) $(tr '\0' ' ' </proc/$p/environ 2>/dev/null | head -c 200)"
    kill -9 $p 2>/dev/null && echo "KILLED $p"
  fi
  p=$((p+1))
done
echo "CHILD $child"`
	var res runner.Result
	a.call(t, "POST", "/v1/runs", map[string]any{"template": "e2e-pool-sib", "argv": []string{"sh", "-c", attack}}, http.StatusOK, &res)
	wg.Wait()
	out := string(res.Stdout.Head)
	if res.Pool == "" || res.ExitCode != 0 {
		t.Fatalf("the attacker: pool %q exit %d: %s %s", res.Pool, res.ExitCode, out, res.Stderr.Head)
	}
	child := grepLines(out, "CHILD ")
	var alive []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "ALIVE ") || strings.HasPrefix(l, "KILLED ") {
			alive = append(alive, l)
		}
	}
	own := strings.TrimPrefix(child, "CHILD ")
	if len(alive) != 2 || !strings.HasPrefix(alive[0], "ALIVE "+own+" sleep 300") || alive[1] != "KILLED "+own {
		t.Fatalf("the attacker saw processes other than its own child %s (or missed it): %q", own, alive)
	}
	if victim.Pool == "" || victim.Reason != runner.ReasonExited || victim.ExitCode != 0 || string(victim.Stdout.Head) != "alive\n" {
		t.Fatalf("the sibling run: %s exit %d %q %s", victim.Reason, victim.ExitCode, victim.Stdout.Head, victim.Error)
	}
	// The sandboxes that waited in the pool through the attack (the oldest,
	// so claimed first) still run jobs.
	left := slices.DeleteFunc(slices.Clone(waiting), func(id string) bool { return id == victim.ID || id == res.ID })
	if len(left) != 2 {
		t.Fatalf("the victim %s and the attacker %s were not two of the pooled %v", victim.ID, res.ID, waiting)
	}
	for range len(left) {
		var r runner.Result
		a.call(t, "POST", "/v1/runs", map[string]any{"template": "e2e-pool-sib", "argv": []string{"echo", "ok"}}, http.StatusOK, &r)
		if !slices.Contains(left, r.ID) || string(r.Stdout.Head) != "ok\n" {
			t.Fatalf("a run after the attack: id %s (waiting %v) %q %s", r.ID, left, r.Stdout.Head, r.Error)
		}
	}
}

// TestServeSandboxPoolCrossClaim: six creates take pooled long-lived
// sandboxes one after another; in each the client's job leaves markers,
// login files and background processes (plain, setsid and --detach), and
// each new claim, made while the one before still lives, finds nothing of
// it: not the previous sandbox's files, nor its processes. Any engine.
func TestServeSandboxPoolCrossClaim(t *testing.T) {
	poolTemplate(t, "e2e-sbpool-leak")
	s := startServer(t, "--pool-sandboxes", "e2e-sbpool-leak=2")
	a := s.apis()[0]
	seen := map[string]bool{}
	var prev string
	for i := range 6 {
		pooled := a.waitPooled(t, "refilled", atLeast(1))
		var si runner.SandboxInfo
		a.call(t, "POST", "/v1/sandboxes", map[string]any{"template": "e2e-sbpool-leak", "idle_timeout": "5m"}, http.StatusCreated, &si)
		t.Cleanup(func() { a.do(t, "DELETE", "/v1/sandboxes/"+si.ID, nil) })
		if !slices.Contains(pooled, si.ID) || seen[si.ID] {
			t.Fatalf("create %d took %s, not a fresh pooled sandbox (pooled %v)", i, si.ID, pooled)
		}
		seen[si.ID] = true
		run := fmt.Sprintf("s%d", i)
		res := a.exec(t, si.ID, map[string]any{"env": []string{"RUN=" + run}, "argv": []string{"sh", "-c", leakScript}})
		if res.ExitCode != 0 {
			t.Fatalf("create %d: the job: exit %d %s %s", i, res.ExitCode, res.Stdout.Head, res.Stderr.Head)
		}
		rep := parseLeak(string(res.Stdout.Head))
		if err := rep.check(run, "/tmp", "/dev/shm", "/out", "/home/user"); err != nil {
			t.Fatalf("create %d (%s): %v\nstdout:\n%s", i, si.ID, err, res.Stdout.Head)
		}
		a.exec(t, si.ID, map[string]any{"detach": true, "argv": []string{"sh", "-c", "while :; do echo x >/tmp/airlock-marker-detach-$0; sleep 1; done", "airlock-bg-detach-" + run}})
		// The previous claim goes once this one has looked: it lived
		// through the look, background processes and all.
		if prev != "" {
			a.call(t, "DELETE", "/v1/sandboxes/"+prev, nil, http.StatusNoContent, nil)
		}
		prev = si.ID
	}
	a.call(t, "DELETE", "/v1/sandboxes/"+prev, nil, http.StatusNoContent, nil)
	waitHost(t, "airlock-bg-")
}

// TestServePoolKill9MidRun: SIGKILL of the server while a pooled run's
// program (with a background process of its own) runs, then `airlock
// reap`: nothing of the pool or the run is left (runtime sandboxes,
// cgroups, mounts, bundles, run directories, pool records, processes),
// and a restarted server refills its pool and serves runs.
func TestServePoolKill9MidRun(t *testing.T) {
	s, a, ids, ok := poolServer(t, "e2e-pool-k9run", 2)
	if !ok {
		return
	}
	go func() {
		// The server dies under this request: its answer is no one's.
		req, _ := http.NewRequest("POST", a.base+"/v1/runs", strings.NewReader(`{"template":"e2e-pool-k9run","argv":["sh","-c","setsid sh -c 'sleep 600' airlock-k9-bg & echo started >/out/started; exec sleep 600"]}`))
		if resp, err := a.client.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	// The claimed sandbox's program has begun when its /out (a host tmpfs)
	// holds its file.
	var claimed string
	deadline := time.Now().Add(60 * time.Second)
	for claimed == "" {
		for _, id := range ids {
			if _, err := os.Stat(filepath.Join(rootDir, "runs", id, "out", "started")); err == nil {
				claimed = id
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pooled sandbox of %v started the run within 60s\n%s", ids, s.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	s.cmd.Wait()
	ids = append(ids, poolIDs()...)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	held := poolLeftovers(ids)
	if !slices.ContainsFunc(held, func(l string) bool { return strings.Contains(l, "runtime sandbox") && strings.Contains(l, claimed) }) {
		t.Fatalf("after SIGKILL the running sandbox %s is not there to reap: %v", claimed, held)
	}
	// The runtime's processes name the tests' root, not the run. (Under
	// gVisor `runsc run` dies with the server, and its sandbox with it;
	// what is left is its state, cgroup, bundle and run directory.)
	procs := append(hostProcs(rootDir+"/"), hostProcs("airlock-k9-bg")...)
	t.Logf("after SIGKILL of the server: %d things held, %v, and %d processes", len(held), held, len(procs))
	if out, err := exec.Command(airlockBin, "--root", rootDir, "reap").CombinedOutput(); err != nil || !strings.Contains(string(out), claimed) {
		t.Fatalf("airlock reap: %v: %s; want %s reaped", err, out, claimed)
	}
	if left := append(append(poolLeftovers(ids), hostProcs(rootDir+"/")...), hostProcs("airlock-k9-bg")...); len(left) > 0 {
		t.Fatalf("after kill -9 of the server mid-run and airlock reap, left: %v", left)
	}
	s2 := startServer(t, "--pool", "e2e-pool-k9run=2")
	a2 := s2.apis()[0]
	fresh := a2.waitPooled(t, "refilled", atLeast(2))
	var res runner.Result
	a2.call(t, "POST", "/v1/runs", map[string]any{"template": "e2e-pool-k9run", "argv": []string{"echo", "again"}}, http.StatusOK, &res)
	if res.Pool != "e2e-pool-k9run" || string(res.Stdout.Head) != "again\n" || slices.Contains(ids, res.ID) || !slices.Contains(fresh, res.ID) {
		t.Fatalf("a run on the restarted server's pool: pool %q id %s (fresh %v, reaped %v) %q %s", res.Pool, res.ID, fresh, ids, res.Stdout.Head, res.Error)
	}
}

// poolIDs lists the pooled sandboxes recorded on disk (pool.json), which
// a dead server's refills may have added.
func poolIDs() []string {
	files, _ := filepath.Glob(filepath.Join(rootDir, "runs", "*", "pool.json"))
	var ids []string
	for _, f := range files {
		ids = append(ids, filepath.Base(filepath.Dir(f)))
	}
	return ids
}

// poolLeftovers lists what the host still holds of runs ids: the suite's
// leftovers, mounts, state files not terminated, pool records, and host
// processes naming them.
func poolLeftovers(ids []string) []string {
	var left []string
	for _, l := range leftovers() {
		for _, id := range ids {
			if strings.Contains(l, id) {
				left = append(left, l)
			}
		}
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, id := range ids {
		if bytes.Contains(mi, []byte(id)) {
			left = append(left, "mount of "+id)
		}
		if b, err := os.ReadFile(filepath.Join(rootDir, "state", id+".json")); err == nil {
			var rec struct{ State string }
			if json.Unmarshal(b, &rec) != nil || rec.State != "terminated" {
				left = append(left, fmt.Sprintf("state %s: %s", id, b))
			}
		}
		if _, err := os.Stat(filepath.Join(rootDir, "runs", id, "pool.json")); err == nil {
			left = append(left, "pool record "+id)
		}
		for _, p := range hostProcs(id) {
			left = append(left, "process "+p)
		}
	}
	return left
}
