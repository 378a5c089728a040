package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// docs/run.md's table of run flags names every flag of `airlock run`, and
// no other; a default shown as one literal is the flag's.
func TestRunFlagsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/run.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "## Run flags\n")
	if !ok {
		t.Fatal(`docs/run.md has no "## Run flags" section`)
	}
	table, _, _ = strings.Cut(table, "\n\n\n")
	table, _, _ = strings.Cut(table, "\n## ")
	flagName := regexp.MustCompile("`--([a-z-]+)")
	literal := regexp.MustCompile("^`([^`]+)`$")
	doc := map[string]string{} // flag → the default shown, when one literal
	for _, row := range strings.Split(table, "\n") {
		cols := strings.Split(row, " | ")
		if len(cols) < 3 || !strings.HasPrefix(row, "| `--") {
			continue
		}
		names := flagName.FindAllStringSubmatch(cols[0], -1)
		for _, n := range names {
			doc[n[1]] = ""
			if m := literal.FindStringSubmatch(strings.TrimSpace(cols[1])); m != nil && len(names) == 1 {
				doc[n[1]] = m[1]
			}
		}
	}
	cmd, _, err := newRootCmd().Find([]string{"run"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		seen[f.Name] = true
		shown, ok := doc[f.Name]
		switch {
		case !ok:
			t.Errorf("docs/run.md's run flags do not list --%s", f.Name)
		case shown != "" && !strings.HasPrefix(shown, "-") && f.DefValue != "" && f.DefValue != shown:
			t.Errorf("docs/run.md shows --%s's default as %q; it is %q", f.Name, shown, f.DefValue)
		}
	})
	for name := range doc {
		if !seen[name] {
			t.Errorf("docs/run.md lists --%s, which airlock run does not take", name)
		}
	}
}
