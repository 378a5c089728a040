// Command precompile compiles runsc's own seccomp programs ahead of time,
// the step gVisor's Bazel build takes and a plain `go build` does not.
//
// A Go build of runsc ships the stub filter_precompiled.go of the
// sentry's and the gofer's filter packages, which registers no program,
// so every sandbox start builds both filters from their rules (about
// 70 ms for the sentry's on a 2-CPU host). This writes, into OUT, a copy
// of each stub with every program the package's config precompiles
// registered, and OUT/overlay.json mapping the stubs to the copies, for
// `go build -overlay`. The rules, and so the filters, are the same; only
// where they are compiled changes. A stub that no longer has the shape
// this expects (another gVisor version) is an error, not a silent build
// without the programs.
//
// Usage: precompile OUT
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"gvisor.dev/gvisor/pkg/seccomp/precompiledseccomp"
	bootconfig "gvisor.dev/gvisor/runsc/boot/filter/config"
	goferconfig "gvisor.dev/gvisor/runsc/fsgofer/filter/config"
)

// stubFile is the file a Go build ships in each filter package.
const stubFile = "filter_precompiled.go"

// What is rewritten in a stub: the flag, and the empty registration.
const (
	disabled   = "const PrecompilationDisabledAtBuildTime = true"
	enabled    = "const PrecompilationDisabledAtBuildTime = false"
	registered = "\tprecompiledPrograms = programs\n"
)

type filterPkg struct {
	path     string // the filter package, which holds the stub
	programs func() ([]precompiledseccomp.Program, error)
	// keep are terms of a program's name (its config key) every kept
	// program has.
	keep []string
}

// The sentry's programs kept are those of the configurations airlock
// starts runsc in: systrap, no host network, no device proxies. gVisor
// precompiles 576; all of them are 17 MB of Go, and their registration
// at every start takes longer than the build they spare. A runsc started
// otherwise builds its filter at the start, as without this step.
var pkgs = []filterPkg{
	{"gvisor.dev/gvisor/runsc/boot/filter", bootconfig.PrecompiledPrograms,
		[]string{`Platform="systrap"`, "HostNetwork=false", "NVProxy=false", "TPUProxy=false", "RDMAProxy=false"}},
	{"gvisor.dev/gvisor/runsc/fsgofer/filter", goferconfig.PrecompiledPrograms, nil},
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: precompile OUT")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintf(os.Stderr, "precompile: %v\n", err)
		os.Exit(1)
	}
}

func run(out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	replace := map[string]string{}
	for i, p := range pkgs {
		dir, err := exec.Command("go", "list", "-f", "{{.Dir}}", p.path).Output()
		if err != nil {
			return fmt.Errorf("finding %s: %w", p.path, err)
		}
		stub := filepath.Join(strings.TrimSpace(string(dir)), stubFile)
		src, err := os.ReadFile(stub)
		if err != nil {
			return err
		}
		all, err := p.programs()
		if err != nil {
			return fmt.Errorf("precompiling %s's programs: %w", p.path, err)
		}
		progs := kept(all, p.keep)
		if len(progs) == 0 {
			return fmt.Errorf("none of %s's %d programs has all of %q: this gVisor version names its configurations otherwise", p.path, len(all), p.keep)
		}
		gen, err := register(string(src), progs)
		if err != nil {
			return fmt.Errorf("%s: %w", stub, err)
		}
		dst, err := filepath.Abs(filepath.Join(out, fmt.Sprintf("%d_%s", i, stubFile)))
		if err != nil {
			return err
		}
		if err := os.WriteFile(dst, []byte(gen), 0o644); err != nil {
			return err
		}
		replace[stub] = dst
		fmt.Printf("%s: %d of %d programs\n", p.path, len(progs), len(all))
	}
	b, err := json.MarshalIndent(struct{ Replace map[string]string }{replace}, "", "\t")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "overlay.json"), append(b, '\n'), 0o644)
}

// kept returns the programs whose names hold every term.
func kept(progs []precompiledseccomp.Program, terms []string) []precompiledseccomp.Program {
	var out []precompiledseccomp.Program
	for _, p := range progs {
		if hasAll(" "+p.Name+" ", terms) {
			out = append(out, p)
		}
	}
	return out
}

func hasAll(name string, terms []string) bool {
	for _, t := range terms {
		if !strings.Contains(name, " "+t+" ") {
			return false
		}
	}
	return true
}

// register returns the stub with progs registered and the flag turned.
func register(stub string, progs []precompiledseccomp.Program) (string, error) {
	for _, anchor := range []string{disabled, registered} {
		if n := strings.Count(stub, anchor); n != 1 {
			return "", fmt.Errorf("the stub holds %q %d times, not once: this gVisor version's stub is not the one this precompiler knows", strings.TrimSpace(anchor), n)
		}
	}
	var regs strings.Builder
	for _, p := range progs {
		regs.WriteString(p.Registration("\t", "precompiledseccomp", "programs"))
	}
	stub = strings.Replace(stub, disabled, enabled, 1)
	return strings.Replace(stub, registered, regs.String()+registered, 1), nil
}
