// Command start measures sandbox start-up side by side, interleaved in one
// run so that the ratios hold on a noisy machine: airlock's oci engine,
// bare `runsc run` of an equivalent bundle (with and without the run log
// airlock asks of runsc), airlock's docker engine, and
// `docker run --runtime=<runsc> --network none`. `make bench-start` runs it
// after setup.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/engine/oci"
	"github.com/airlock-sandbox/airlock/internal/e2etest"
	"github.com/airlock-sandbox/airlock/internal/timing"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/seccomp"
	"github.com/airlock-sandbox/airlock/store"
	"golang.org/x/sys/unix"
)

func main() {
	n := flag.Int("n", 30, "runs per scenario")
	flag.Parse()
	if err := run(*n); err != nil {
		fmt.Fprintf(os.Stderr, "bench-start: %v\n", err)
		os.Exit(1)
	}
}

type scenario struct {
	name string
	argv []string
	prep func(i int) error // per-run set-up outside the timed part
	took []time.Duration
	// phases, for airlock's oci runs, collects the runner's phase line
	// (--debug) of each run.
	phases map[string][]time.Duration
	order  []string
}

// run runs s once, timed, and returns its output.
func (s *scenario) run() ([]byte, error) {
	start := time.Now()
	out, err := exec.Command(s.argv[0], s.argv[1:]...).CombinedOutput()
	took := time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("%s: %v\n%s", s.name, err, out)
	}
	s.took = append(s.took, took)
	return out, nil
}

// settle is the pause before each run, for what the last one left the
// machine to do.
const settle = 100 * time.Millisecond

// shuffled is a copy of ss in a random order.
func shuffled(rng *rand.Rand, ss []*scenario) []*scenario {
	out := slices.Clone(ss)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// phaseLine matches one "name=duration" of the runner's phase line.
var phaseLine = regexp.MustCompile(`msg="run phases"(( \w+=\S+)+)`)

// addPhases records the phase line in out, and the time outside it.
func (s *scenario) addPhases(out []byte, took time.Duration) {
	m := phaseLine.FindSubmatch(out)
	if m == nil {
		return
	}
	if s.phases == nil {
		s.phases = map[string][]time.Duration{}
	}
	in := time.Duration(0)
	for _, kv := range strings.Fields(string(m[1])) {
		k, v, _ := strings.Cut(kv, "=")
		d, err := time.ParseDuration(v)
		if err != nil {
			continue
		}
		if _, seen := s.phases[k]; !seen {
			s.order = append(s.order, k)
		}
		s.phases[k] = append(s.phases[k], d)
		in += d
	}
	const outside = "outside the runner"
	if _, seen := s.phases[outside]; !seen {
		s.order = append([]string{outside}, s.order...)
	}
	s.phases[outside] = append(s.phases[outside], took-in)
}

func run(n int) error {
	ctx := context.Background()
	root := e2etest.SysRoot()
	tmp, err := os.MkdirTemp("", "airlock-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin, err := e2etest.Build(tmp, "./cmd/airlock")
	if err != nil {
		return err
	}
	ref, err := e2etest.ImportBusybox(bin, root, tmp, "airlock-bench/busybox")
	if err != nil {
		return err
	}
	st, err := store.Open(filepath.Join(root, "store"))
	if err != nil {
		return err
	}
	rootfs, err := st.Rootfs(ctx, ref.ID)
	if err != nil {
		return err
	}

	// The bare runsc bundle: the same policy, as airlock would write it,
	// with runsc creating its own cgroup. runsc applies the bundle's seccomp
	// profile only with --oci-seccomp, which airlock always passes (it costs
	// runsc about 40 ms a start here); so does the bare run, so that both
	// sides isolate alike.
	runsc := filepath.Join(root, "tools", "runsc")
	state := filepath.Join(tmp, "runsc-state")
	// runsc binds an empty network namespace in its state root, which
	// would keep tmp from being removed.
	defer unix.Unmount(filepath.Join(state, "null-netns"), unix.MNT_DETACH)
	bundle := filepath.Join(tmp, "bundle")
	os.MkdirAll(bundle, 0o700)
	pol := isolation.Default()
	prof, err := seccomp.Load("default")
	if err == nil {
		prof, err = seccomp.ForGVisor(prof)
	}
	if err != nil {
		return err
	}
	pol.Seccomp = &isolation.SeccompProfile{JSON: prof.Bytes(), Spec: prof.Spec(), SHA256: prof.SHA256()}
	bare := &scenario{name: "runsc run (bare)"}
	bare.prep = func(i int) error {
		spec, err := isolation.OCISpec(pol, isolation.OCIJob{
			Rootfs: rootfs, Argv: []string{"/bin/true"}, Env: []string{"PATH=/bin"}, Workdir: "/",
			CgroupsPath: fmt.Sprintf("/airlock-bench/%d", i),
		})
		if err != nil {
			return err
		}
		b, _ := json.Marshal(spec)
		// The same runsc flags airlock's oci engine passes on this host.
		bare.argv = append(append([]string{runsc, "--root", state}, oci.RunscFlags()...), "run", "--bundle", bundle, fmt.Sprintf("bench-%d", i))
		return os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o600)
	}
	// The bare run again with the run log airlock asks of runsc (it tells
	// a sandbox killed from outside from a program's own SIGKILL): how
	// much of the gap is runsc's own logging.
	logged := &scenario{name: "runsc run (bare, airlock's run log)"}
	logged.prep = func(i int) error {
		if err := bare.prep(n + i); err != nil { // a cgroup of its own
			return err
		}
		logs := filepath.Join(tmp, "logs", strconv.Itoa(i))
		logged.argv = append([]string{runsc, "--root", state}, append(append(oci.RunscFlags(), engine.GVisorLogFlags(logs, "run")...),
			"run", "--bundle", bundle, fmt.Sprintf("bench-log-%d", i))...)
		return nil
	}
	ociArgs := []string{"run", "--engine", "oci", "--out-dir", "none", "--image", ref.String(), "--", "/bin/true"}
	oci := &scenario{name: "airlock run --engine oci", argv: append([]string{bin, "--root", root}, ociArgs...)}
	airDocker := &scenario{name: "airlock run --engine docker", argv: []string{bin, "--root", root, "run", "--engine", "docker", "--out-dir", "none", "--image", ref.String(), "--", "/bin/true"}}
	dockerRun := &scenario{name: "docker run --runtime=airlock-runsc", argv: []string{"docker", "run", "--rm", "--runtime=" + isolation.DockerRuntimes[isolation.GVisor], "--network", "none", ref.ID.String(), "/bin/true"}}
	scenarios := []*scenario{oci, bare, logged, airDocker, dockerRun}
	fmt.Fprintf(os.Stderr, "%d runs of each of %d scenarios, interleaved…\n", n, len(scenarios))
	// Each round runs the scenarios in a new random order, and each run
	// starts after a pause: `docker run --rm` returns while dockerd and
	// its shim still tear the container down, and a fixed order would
	// always hand that work to the same next scenario (in a rotation, oci
	// always came right after docker run, about 5 ms a run here).
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < n; i++ {
		for _, s := range shuffled(rng, scenarios) {
			time.Sleep(settle)
			if s.prep != nil {
				if err := s.prep(i); err != nil {
					return err
				}
			}
			if _, err := s.run(); err != nil {
				return err
			}
		}
		if (i+1)%10 == 0 {
			fmt.Fprintf(os.Stderr, "  %d/%d rounds\n", i+1, n)
		}
	}
	// Where oci's time goes, from runs of their own: the timed runs go
	// without --debug, as a user's would (its log lines cost about 1 ms).
	phased := &scenario{name: oci.name + " --debug", argv: append([]string{bin, "--root", root, "--debug"}, ociArgs...)}
	for i := 0; i < max(n/2, 5); i++ {
		time.Sleep(settle)
		out, err := phased.run()
		if err != nil {
			return err
		}
		phased.addPhases(out, phased.took[len(phased.took)-1])
	}
	// runsc removed each run's cgroup; the parent it made is left empty.
	for _, dir := range []string{"/sys/fs/cgroup/airlock-bench"} {
		os.Remove(dir)
	}
	if hier, err := filepath.Glob("/sys/fs/cgroup/*/airlock-bench"); err == nil {
		for _, dir := range hier {
			os.Remove(dir)
		}
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tp50 ms\tp99 ms\tmean ms\t")
	p50 := map[string]time.Duration{}
	for _, s := range scenarios {
		p50[s.name] = timing.Percentile(s.took, 50)
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t\n", s.name, timing.MS(p50[s.name]), timing.MS(timing.Percentile(s.took, 99)), timing.MS(timing.Mean(s.took)))
	}
	tw.Flush()
	ratio := func(a, b *scenario) float64 { return float64(p50[a.name]) / float64(p50[b.name]) }
	fmt.Printf("\np50 ratios: oci / bare runsc = %.2f (target ≤ 1.1); oci / docker run = %.2f (target ≤ 0.5); airlock docker / docker run = %.2f\n",
		ratio(oci, bare), ratio(oci, dockerRun), ratio(airDocker, dockerRun))
	fmt.Printf("of oci's %.1f ms over bare runsc, runsc's run log takes %.1f ms (bare with it / without = %.2f)\n",
		timing.MS(p50[oci.name]-p50[bare.name]), timing.MS(p50[logged.name]-p50[bare.name]), ratio(logged, bare))
	if len(phased.order) > 0 {
		fmt.Printf("\nwhere %s goes (the phase line of %d more runs with --debug, p50 of each phase; wait is runsc's, the program included):\n", oci.name, len(phased.phases[phased.order[0]]))
		for _, k := range phased.order {
			fmt.Printf("  %-20s %7.2f ms\n", k, timing.MS(timing.Percentile(phased.phases[k], 50)))
		}
	}
	return nil
}
