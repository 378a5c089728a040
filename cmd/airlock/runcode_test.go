package main

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestParseRunCode(t *testing.T) {
	got, err := parseRunCode([]string{"python=py-np", "bash=sh"})
	if err != nil || len(got) != 2 || got["python"] != "py-np" || got["bash"] != "sh" {
		t.Errorf("parseRunCode = %v, %v", got, err)
	}
	for _, c := range []struct {
		vals []string
		want string
	}{
		{[]string{"python"}, "give LANG=TEMPLATE"},
		{[]string{"=py"}, "give LANG=TEMPLATE"},
		{[]string{"python="}, "give LANG=TEMPLATE"},
		{[]string{"python=../x"}, `--run-code-template "python=../x"`},
		{[]string{"python=a", "python=b"}, `names language "python" twice`},
	} {
		_, err := parseRunCode(c.vals)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseRunCode(%q) = %v; want a usage error saying %q", c.vals, err, c.want)
		}
	}
}

// TestTemplateCreateRunCode: --run-code's misuses are usage errors, said
// before anything is made.
func TestTemplateCreateRunCode(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"rc", "--run-code", "python", "--warm", "--", "python3"}, "give one of them"},
		{[]string{"rc", "--import", "numpy"}, "give --run-code python with it"},
		{[]string{"rc", "--run-code", "python", "--", "python3"}, "takes the template's name and no program"},
		{[]string{"rc", "--run-code", "bash"}, "only python has a fork server"},
		{[]string{"rc", "--run-code", "python", "--import", "os;x"}, `--import "os;x" is not a Python module name`},
	} {
		cmd := newTemplateCreateCmd(&globals{root: t.TempDir()})
		cmd.SetArgs(c.args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		err := cmd.Execute()
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("template create %q = %v; want a usage error saying %q", c.args, err, c.want)
		}
	}
}
