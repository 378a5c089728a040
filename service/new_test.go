package service

import (
	"slices"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/forkserver"
	"github.com/airlock-sandbox/airlock/templates"
)

// Which runs on a run-code template go to its fork server, and how.
func TestForkServerJob(t *testing.T) {
	rc := &templates.Template{Warm: []string{forkserver.Interpreter, "-c", forkserver.Script}}
	for _, c := range []struct {
		t     *templates.Template
		argv  []string
		want  []string
		files bool
	}{
		{rc, []string{"python3", "/work/job.py", "a"}, forkserver.ClientArgv("/work/job.py", "a"), false},
		{rc, []string{"python3", "-c", "print(1)", "a"}, forkserver.ClientArgv(codeFile, "a"), true},
		{rc, []string{"python3", "-"}, nil, false},
		{rc, []string{"python3", "-I", "x.py"}, nil, false},
		{rc, []string{"python3", "-c"}, nil, false},
		{rc, []string{"sh", "-c", "true"}, nil, false},
		{&templates.Template{Warm: []string{"python3", "-c", "pass"}}, []string{"python3", "x.py"}, nil, false},
	} {
		argv, files := forkServerJob(c.t, c.argv)
		if !slices.Equal(argv, c.want) || (files != nil) != c.files {
			t.Errorf("%q: %q, files %v; want %q, files %v", c.argv, argv, files, c.want, c.files)
		}
		if c.files && string(files[codeFile]) != c.argv[2] {
			t.Errorf("%q: %s holds %q", c.argv, codeFile, files[codeFile])
		}
	}
}
