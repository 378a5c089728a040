package runner

import (
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/wire"
)

// A command the kernel could never start is refused up front, as invalid
// input naming the bound; one at the bounds passes.
func TestCheckCommandBounds(t *testing.T) {
	many := func(n int, s string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = s
		}
		return out
	}
	for _, c := range []struct {
		name      string
		argv, env []string
		want      string // "" when accepted
	}{
		{"plain", []string{"true"}, []string{"A=1"}, ""},
		{"no command", nil, nil, "no command"},
		{"NUL", []string{"a\x00b"}, nil, "NUL"},
		{"bad env", []string{"true"}, []string{"1A=x"}, "NAME=VALUE"},
		{"env at its cap", []string{"true"}, many(wire.MaxEnv, "A=1"), ""},
		{"env past its cap", []string{"true"}, many(wire.MaxEnv+1, "A=1"), "at most 1024"},
		{"one string at the kernel's bound", []string{"echo", strings.Repeat("x", maxArgString)}, nil, ""},
		{"one string past it", []string{"echo", strings.Repeat("x", maxArgString+1)}, nil, "MAX_ARG_STRLEN"},
		{"an env value past it", []string{"true"}, []string{"A=" + strings.Repeat("x", maxArgString)}, "MAX_ARG_STRLEN"},
		{"too much in all", append([]string{"echo"}, many(20, strings.Repeat("x", 120<<10))...), nil, "ARG_MAX"},
		{"many small arguments", append([]string{"echo"}, many(300000, "x")...), nil, "ARG_MAX"},
	} {
		err := checkCommand(c.argv, c.env)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v; want it accepted", c.name, err)
		case c.want != "" && (!errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v; want invalid input naming %q", c.name, err, c.want)
		}
	}
}
