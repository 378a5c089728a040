package errkind

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// section returns the lines of the markdown file from the heading to the
// next heading of any level.
func section(t *testing.T, file, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	in := false
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(line, "#") {
			if in {
				break
			}
			in = strings.TrimLeft(line, "# ") == heading
			continue
		}
		if in {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no section %q", file, heading)
	}
	return out
}

// docs/api.md's table of kinds is this table: every kind once, with its
// status, and nothing else.
func TestAPIDocMatches(t *testing.T) {
	row := regexp.MustCompile("^\\| `([a-z_]+)` \\| ([0-9]{3}) \\|")
	got := map[Kind]int{}
	for _, line := range section(t, "../docs/api.md", "Errors") {
		if m := row.FindStringSubmatch(line); m != nil {
			st, _ := strconv.Atoi(m[2])
			got[Kind(m[1])] = st
		}
	}
	for _, r := range Table {
		if st, ok := got[r.Kind]; !ok || st != r.Status {
			t.Errorf("docs/api.md: kind %s has status %d (listed %v), want %d", r.Kind, st, ok, r.Status)
		}
		delete(got, r.Kind)
	}
	for k := range got {
		t.Errorf("docs/api.md lists kind %s, which the table has not", k)
	}
}

// docs/exit-codes.md names every kind beside its code.
func TestReadmeExitCodes(t *testing.T) {
	row := regexp.MustCompile(`^\| ([0-9]+) \| (.*) \|$`)
	byCode := map[int]string{}
	for _, line := range section(t, "../docs/exit-codes.md", "Exit codes") {
		if m := row.FindStringSubmatch(line); m != nil {
			code, _ := strconv.Atoi(m[1])
			byCode[code] = m[2]
		}
	}
	for _, r := range Table {
		if !strings.Contains(byCode[r.Exit], "`"+string(r.Kind)+"`") {
			t.Errorf("docs/exit-codes.md: the row of exit code %d does not name kind %s: %q", r.Exit, r.Kind, byCode[r.Exit])
		}
	}
}
