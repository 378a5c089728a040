// Command session measures a live sandbox's execs and file transfers side
// by side, interleaved in one run so that the ratios hold on a noisy
// machine:
//
//   - exec of `true`: `airlock exec` (oci and docker engines, gVisor), the
//     Go API (runner.Open once, then Sandbox.Exec), bare `runsc exec` into
//     the same sandbox, and `docker exec` into a runsc container;
//   - 64 MiB of an exec's stdout: `airlock exec` (both engines) beside
//     `docker exec`, the bytes counted on the host;
//   - one 10 MiB file up and down: `airlock cp` beside `docker cp`;
//   - 1,000 × 10 KB files up and down, one command per file on both sides,
//     and `docker cp` of the whole directory for reference;
//   - the same 1,000 files as one directory tree up and down: `airlock cp`
//     of the directory beside `docker cp` of it.
//
// `make bench-session` runs it after setup.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlock-sandbox/airlock/engine/oci"
	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/internal/e2etest"
	"github.com/airlock-sandbox/airlock/internal/imagetest"
	"github.com/airlock-sandbox/airlock/internal/timing"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
)

func main() {
	n := flag.Int("n", 30, "execs per exec scenario")
	big := flag.Int("big", 10, "rounds of the 10 MiB transfers")
	out := flag.Int("out", 10, "rounds of the 64 MiB exec outputs (0 skips them)")
	files := flag.Int("files", 1000, "files in the many-files transfers (0 skips them)")
	trees := flag.Int("trees", 5, "rounds of the directory-tree transfers (0 skips them)")
	flag.Parse()
	if err := run(*n, *big, *out, *files, *trees); err != nil {
		fmt.Fprintf(os.Stderr, "bench-session: %v\n", err)
		os.Exit(1)
	}
}

type scenario struct {
	name string
	// argv returns the command of round i; nil with fn set runs fn.
	argv func(i int) []string
	// stdout, when above zero, is how many bytes the command must print:
	// they are counted, not kept.
	stdout int64
	fn     func(i int) error
	took   []time.Duration
}

func (s *scenario) once(i int) error {
	start := time.Now()
	if s.fn != nil {
		if err := s.fn(i); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	} else {
		a := s.argv(i)
		cmd := exec.Command(a[0], a[1:]...)
		var out bytes.Buffer
		var n countWriter
		cmd.Stdout, cmd.Stderr = &out, &out
		if s.stdout > 0 {
			cmd.Stdout = &n
		}
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %v\n%s", s.name, err, out.Bytes())
		}
		if s.stdout > 0 && int64(n) != s.stdout {
			return fmt.Errorf("%s: printed %d bytes, want %d: %s", s.name, n, s.stdout, out.Bytes())
		}
	}
	s.took = append(s.took, time.Since(start))
	return nil
}

// countWriter counts what is written to it.
type countWriter int64

func (c *countWriter) Write(b []byte) (int, error) {
	*c += countWriter(len(b))
	return len(b), nil
}

// interleave runs every scenario rounds times, rotating their order each
// round.
func interleave(rounds int, ss []*scenario) error {
	for i := 0; i < rounds; i++ {
		for k := range ss {
			if err := ss[(i+k)%len(ss)].once(i); err != nil {
				return err
			}
		}
	}
	return nil
}

type env struct {
	ctx              context.Context
	bin, root, tmp   string
	busybox          images.Ref
	ociSB, dockerSB  string // airlock sandboxes (gVisor) on each engine
	peer             string // docker container on airlock's runsc runtime
	runsc, runscRoot string
}

func (e *env) airlock(args ...string) (string, error) {
	cmd := exec.Command(e.bin, append([]string{"--root", e.root}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("airlock %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

func run(n, big, outs, files, trees int) error {
	ctx := context.Background()
	root := e2etest.SysRoot()
	tmp, err := os.MkdirTemp("", "airlock-bench-session-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	e := &env{ctx: ctx, root: root, tmp: tmp, runsc: oci.RunscPath(root), runscRoot: filepath.Join(root, "oci", "runsc")}
	if e.bin, err = e2etest.Build(tmp, "./cmd/airlock"); err != nil {
		return err
	}
	layout := filepath.Join(tmp, "busybox")
	if err := imagetest.BusyboxLayout(layout); err != nil {
		return err
	}
	out, err := e.airlock("image", "import", "--name", "airlock-bench/busybox", layout)
	if err != nil {
		return err
	}
	if e.busybox, err = images.ParseRef(out); err != nil {
		return err
	}
	// The download allowlist takes octet-stream (the 10 MiB file is random
	// bytes) and plain text (the many small files).
	create := func(engineName string) (string, error) {
		return e.airlock("sandbox", "create", "--engine", engineName, "--isolation", "gvisor", "--image", e.busybox.String(),
			"--download-types", "application/octet-stream,text/plain", "--idle-timeout", "30m", "--ttl", "2h", "--output-limit", "128MiB")
	}
	if e.ociSB, err = create("oci"); err != nil {
		return err
	}
	defer e.airlock("sandbox", "rm", e.ociSB)
	if e.dockerSB, err = create("docker"); err != nil {
		return err
	}
	defer e.airlock("sandbox", "rm", e.dockerSB)
	peer, err := exec.Command("docker", "run", "-d", "--rm", "--runtime="+isolation.DockerRuntimes[isolation.GVisor], "--network", "none",
		"--label", "airlock-bench=session", e.busybox.ID.String(), "sleep", "7200").Output()
	if err != nil {
		return fmt.Errorf("starting the docker peer: %w", err)
	}
	e.peer = strings.TrimSpace(string(peer))
	defer exec.Command("docker", "rm", "-f", e.peer).Run()

	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\truns\tp50 ms\tp99 ms\tmean ms\t")
	report := func(ss ...*scenario) {
		for _, s := range ss {
			fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t\n", s.name, len(s.took), timing.MS(timing.Percentile(s.took, 50)),
				timing.MS(timing.Percentile(s.took, 99)), timing.MS(timing.Mean(s.took)))
		}
	}
	p50 := func(s *scenario) time.Duration { return timing.Percentile(s.took, 50) }
	var ratios []string
	ratio := func(what string, a, b *scenario, target string) {
		ratios = append(ratios, fmt.Sprintf("%s = %.2f%s", what, float64(p50(a))/float64(p50(b)), target))
	}

	execs, err := e.execScenarios()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "exec: %d runs of each of %d scenarios, interleaved…\n", n, len(execs))
	if err := interleave(n, execs); err != nil {
		return err
	}
	report(execs...)
	ratio("airlock exec (oci) / docker exec", execs[0], execs[4], " (target ≤ 0.5)")
	ratio("Go API exec / bare runsc exec", execs[2], execs[3], " (target ≤ 1.2)")
	ratio("airlock exec (docker) / docker exec", execs[1], execs[4], "")

	if outs > 0 {
		ss := e.outputScenarios()
		fmt.Fprintf(os.Stderr, "64 MiB of stdout: %d rounds of each of %d scenarios, interleaved…\n", outs, len(ss))
		if err := interleave(outs, ss); err != nil {
			return err
		}
		report(ss...)
		ratio("64 MiB stdout: airlock exec (oci) / docker exec", ss[0], ss[2], "")
		ratio("64 MiB stdout: airlock exec (docker) / docker exec", ss[1], ss[2], "")
	}

	bigs, err := e.bigScenarios()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "10 MiB: %d rounds of each of %d scenarios, interleaved…\n", big, len(bigs))
	if err := interleave(big, bigs); err != nil {
		return err
	}
	report(bigs...)
	ratio("10 MiB up: airlock cp / docker cp", bigs[0], bigs[1], "")
	ratio("10 MiB down: airlock cp / docker cp", bigs[2], bigs[3], "")

	if files > 0 && trees > 0 {
		tree, err := e.treeScenarios(files)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "%d files as one tree: %d rounds of each of %d scenarios, interleaved…\n", files, trees, len(tree))
		if err := interleave(trees, tree); err != nil {
			return err
		}
		report(tree...)
		ratio(fmt.Sprintf("%d files up: airlock cp / docker cp, the directory", files), tree[0], tree[1], " (target ≤ 1.5)")
		ratio(fmt.Sprintf("%d files down: airlock cp / docker cp, the directory", files), tree[2], tree[3], " (target ≤ 1.5)")
	}

	if files > 0 {
		many, err := e.manyScenarios(files)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "%d files: one round of each of %d scenarios…\n", files, len(many))
		if err := interleave(1, many); err != nil {
			return err
		}
		report(many...)
		ratio(fmt.Sprintf("%d files up: airlock cp / docker cp, a command per file", files), many[0], many[1], "")
		ratio(fmt.Sprintf("%d files down: airlock cp / docker cp, a command per file", files), many[3], many[4], "")
	}
	tw.Flush()
	fmt.Printf("\np50 ratios:\n  %s\n", strings.Join(ratios, "\n  "))
	return nil
}

func (e *env) execScenarios() ([]*scenario, error) {
	eng, err := oci.New(e.root)
	if err != nil {
		return nil, err
	}
	r, err := runner.New(runner.WithRoot(e.root), runner.WithEngine(eng))
	if err != nil {
		return nil, err
	}
	sb, err := r.Open(e.ctx, e.ociSB)
	if err != nil {
		return nil, err
	}
	bare := append(append([]string{e.runsc, "--root", e.runscRoot}, oci.RunscFlags()...),
		"exec", "--user", "65534:65534", "airlock-"+e.ociSB, "/bin/true")
	return []*scenario{
		{name: "airlock exec (oci, gVisor)", argv: func(int) []string { return []string{e.bin, "--root", e.root, "exec", e.ociSB, "--", "true"} }},
		{name: "airlock exec (docker, gVisor)", argv: func(int) []string { return []string{e.bin, "--root", e.root, "exec", e.dockerSB, "--", "true"} }},
		{name: "Go API Sandbox.Exec (oci, gVisor)", fn: func(int) error {
			res, err := sb.Exec(e.ctx, runner.ExecSpec{Argv: []string{"true"}})
			if err == nil && (res.Reason != runner.ReasonExited || res.ExitCode != 0) {
				err = fmt.Errorf("reason %s exit %d", res.Reason, res.ExitCode)
			}
			return err
		}},
		{name: "runsc exec (bare)", argv: func(int) []string { return bare }},
		{name: "docker exec (runsc)", argv: func(int) []string { return []string{"docker", "exec", e.peer, "true"} }},
	}, nil
}

// outputScenarios print 64 MiB of zeros on stdout through each engine's
// exec and through docker exec, to a host that counts them.
func (e *env) outputScenarios() []*scenario {
	const size = 64 << 20
	head := []string{"head", "-c", fmt.Sprint(size), "/dev/zero"}
	through := func(sb string) func(int) []string {
		return func(int) []string { return append([]string{e.bin, "--root", e.root, "exec", sb, "--"}, head...) }
	}
	return []*scenario{
		{name: "64 MiB stdout: airlock exec (oci, gVisor)", argv: through(e.ociSB), stdout: size},
		{name: "64 MiB stdout: airlock exec (docker, gVisor)", argv: through(e.dockerSB), stdout: size},
		{name: "64 MiB stdout: docker exec (runsc)", argv: func(int) []string { return append([]string{"docker", "exec", e.peer}, head...) }, stdout: size},
	}
}

func randomFile(path string, size int) error {
	b := make([]byte, size)
	rand.Read(b)
	return os.WriteFile(path, b, 0o644)
}

func (e *env) bigScenarios() ([]*scenario, error) {
	src := filepath.Join(e.tmp, "big.bin")
	if err := randomFile(src, 10<<20); err != nil {
		return nil, err
	}
	// The files to download are there before the timed part.
	if _, err := e.airlock("cp", src, e.ociSB+":/home/user/big.bin"); err != nil {
		return nil, err
	}
	if out, err := exec.Command("docker", "cp", src, e.peer+":/tmp/big.bin").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("docker cp: %v: %s", err, out)
	}
	down := filepath.Join(e.tmp, "down")
	if err := os.Mkdir(down, 0o700); err != nil {
		return nil, err
	}
	dst := func(who string, i int) string { return filepath.Join(down, fmt.Sprintf("%s-%d.bin", who, i)) }
	return []*scenario{
		{name: "10 MiB up: airlock cp", argv: func(i int) []string {
			return []string{e.bin, "--root", e.root, "cp", src, fmt.Sprintf("%s:/home/user/up-%d.bin", e.ociSB, i)}
		}},
		{name: "10 MiB up: docker cp", argv: func(i int) []string {
			return []string{"docker", "cp", src, fmt.Sprintf("%s:/tmp/up-%d.bin", e.peer, i)}
		}},
		{name: "10 MiB down: airlock cp", argv: func(i int) []string {
			return []string{e.bin, "--root", e.root, "cp", e.ociSB + ":/home/user/big.bin", dst("airlock", i)}
		}},
		{name: "10 MiB down: docker cp", argv: func(i int) []string {
			return []string{"docker", "cp", e.peer + ":/tmp/big.bin", dst("docker", i)}
		}},
	}, nil
}

// manyFiles writes files × 10 KB of text into a new directory dir. Text,
// so that no file's random bytes happen to sniff as a type off the
// allowlist.
func manyFiles(dir string, files int) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	line := strings.Repeat("0123456789abcdef", 6) + "\n"
	body := []byte(strings.Repeat(line, 10_000/len(line)+1)[:10_000])
	for i := 0; i < files; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d.txt", i)), body, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// treeScenarios moves files × 10 KB as one directory: airlock cp of the
// directory beside docker cp of it, each round to a new place; the
// downloads read a copy put there before the timed part.
func (e *env) treeScenarios(files int) ([]*scenario, error) {
	dir := filepath.Join(e.tmp, "tree")
	if err := manyFiles(dir, files); err != nil {
		return nil, err
	}
	if _, err := e.airlock("cp", dir, e.ociSB+":/home/user/tree-src"); err != nil {
		return nil, err
	}
	if out, err := exec.Command("docker", "cp", dir, e.peer+":/tmp/tree-src").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("docker cp: %v: %s", err, out)
	}
	down := filepath.Join(e.tmp, "tree-down")
	if err := os.Mkdir(down, 0o700); err != nil {
		return nil, err
	}
	label := fmt.Sprintf("%d × 10 KB tree", files)
	return []*scenario{
		{name: label + " up: airlock cp", argv: func(i int) []string {
			return []string{e.bin, "--root", e.root, "cp", dir, fmt.Sprintf("%s:/home/user/tree-%d", e.ociSB, i)}
		}},
		{name: label + " up: docker cp", argv: func(i int) []string {
			return []string{"docker", "cp", dir, fmt.Sprintf("%s:/tmp/tree-%d", e.peer, i)}
		}},
		{name: label + " down: airlock cp", argv: func(i int) []string {
			return []string{e.bin, "--root", e.root, "cp", e.ociSB + ":/home/user/tree-src", filepath.Join(down, fmt.Sprintf("airlock-%d", i))}
		}},
		{name: label + " down: docker cp", argv: func(i int) []string {
			return []string{"docker", "cp", e.peer + ":/tmp/tree-src", filepath.Join(down, fmt.Sprintf("docker-%d", i))}
		}},
	}, nil
}

// manyScenarios moves files × 10 KB: one command per file on both sides
// (airlock cp copies one file a command), and docker cp of the directory.
func (e *env) manyScenarios(files int) ([]*scenario, error) {
	name := func(k int) string { return fmt.Sprintf("f%04d.txt", k) }
	dir := filepath.Join(e.tmp, "many")
	if err := manyFiles(dir, files); err != nil {
		return nil, err
	}
	down := filepath.Join(e.tmp, "many-down")
	for _, d := range []string{"airlock", "docker", "docker-dir"} {
		if err := os.MkdirAll(filepath.Join(down, d), 0o700); err != nil {
			return nil, err
		}
	}
	// docker cp works on the container's filesystem as dockerd sees it,
	// which under runsc is not the sandbox's view: make the directory there.
	empty := filepath.Join(e.tmp, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		return nil, err
	}
	if out, err := exec.Command("docker", "cp", empty, e.peer+":/tmp/many").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("docker cp: %v: %s", err, out)
	}
	each := func(argv func(k int) []string) func(int) error {
		return func(int) error {
			for k := 0; k < files; k++ {
				a := argv(k)
				if out, err := exec.Command(a[0], a[1:]...).CombinedOutput(); err != nil {
					return fmt.Errorf("%v: %s", err, out)
				}
			}
			return nil
		}
	}
	label := fmt.Sprintf("%d × 10 KB", files)
	// Order matters within a round only for the downloads, which read what
	// the uploads wrote: interleave(1, …) runs them in this order.
	return []*scenario{
		{name: label + " up: airlock cp, per file", fn: each(func(k int) []string {
			return []string{e.bin, "--root", e.root, "cp", filepath.Join(dir, name(k)), e.ociSB + ":/home/user/many/" + name(k)}
		})},
		{name: label + " up: docker cp, per file", fn: each(func(k int) []string {
			return []string{"docker", "cp", filepath.Join(dir, name(k)), e.peer + ":/tmp/many/" + name(k)}
		})},
		{name: label + " up: docker cp, the directory", argv: func(int) []string {
			return []string{"docker", "cp", dir, e.peer + ":/tmp/many-dir"}
		}},
		{name: label + " down: airlock cp, per file", fn: each(func(k int) []string {
			return []string{e.bin, "--root", e.root, "cp", e.ociSB + ":/home/user/many/" + name(k), filepath.Join(down, "airlock", name(k))}
		})},
		{name: label + " down: docker cp, per file", fn: each(func(k int) []string {
			return []string{"docker", "cp", e.peer + ":/tmp/many/" + name(k), filepath.Join(down, "docker", name(k))}
		})},
		{name: label + " down: docker cp, the directory", argv: func(int) []string {
			return []string{"docker", "cp", e.peer + ":/tmp/many-dir", filepath.Join(down, "docker-dir")}
		}},
	}, nil
}
