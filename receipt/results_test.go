package receipt

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// batchLine is a batch result line for job id whose program exited with
// code and wrote stdout (whole), its receipt signed by key with verdict
// pass.
func batchLine(t *testing.T, key ed25519.PrivateKey, id, stdout string, code int, pass *bool) []byte {
	t.Helper()
	r := resultSample()
	r.RunID, r.JobID, r.Pass, r.ExitCode = "run-"+id, id, pass, code
	r.Stdout = StreamOf(hash(stdout), int64(len(stdout)), false, []byte(stdout), nil)
	s, err := Sign(key, r)
	if err != nil {
		t.Fatal(err)
	}
	return edit(t, resultOf(t, s), func(m map[string]any) {
		m["stdout"] = map[string]any{"text": stdout, "bytes": len(stdout), "truncated": false, "sha256": hash(stdout)}
	})
}

func trusting(pub ed25519.PublicKey) KeyFor {
	return func(s Signed) (ed25519.PublicKey, string, error) {
		if !bytes.Equal(s.PublicKey, pub) {
			return nil, "", ErrUntrustedKey
		}
		return pub, "host", nil
	}
}

func TestCheckResults(t *testing.T) {
	key, other := newKey(t), newKey(t)
	yes, no := new(true), new(false)
	exp := func(s string) *string { return &s }
	a := batchLine(t, key, "a", "42\n", 0, yes)
	b := batchLine(t, key, "b", "41\n", 0, no)
	c := batchLine(t, key, "c", "anything\n", 0, nil)
	errLine := []byte(`{"job_id":"d","id":"","reason":"error","exit_code":-1,"error":"the engine failed","error_kind":"unavailable"}`)
	jobs := map[string]*string{"a": exp("42\n"), "b": exp("42\n"), "c": nil, "d": exp("x")}
	file := func(lines ...[]byte) *bytes.Reader {
		return bytes.NewReader(append(bytes.Join(lines, []byte("\n")), '\n'))
	}

	rep, err := CheckResults(file(a, b, c, errLine), trusting(key.Public().(ed25519.PublicKey)), jobs)
	if err != nil || !rep.OK() || rep.Verified != 3 || rep.UnsignedErrors != 1 || rep.Passed != 1 || rep.Failed != 1 {
		t.Fatalf("the whole file: %+v, %v", rep, err)
	}

	for _, tc := range []struct {
		name  string
		lines [][]byte
		jobs  map[string]*string
		want  string // in a line's problem, or "missing" for a job none answers
	}{
		{"a line removed", [][]byte{a, c, errLine}, jobs, "missing"},
		{"a line repeated", [][]byte{a, b, c, errLine, a}, jobs, "answered on line 1 already"},
		{"a job from elsewhere", [][]byte{a, b, c, errLine, batchLine(t, key, "z", "", 0, nil)}, jobs, `job "z" is not one of the batch's jobs`},
		// The node judged another expected stdout than the batch's own.
		{"a verdict on another expected stdout", [][]byte{a, batchLine(t, key, "b", "41\n", 0, yes), c, errLine}, jobs, "not the verdict on the job's expected stdout (false)"},
		{"a verdict given where none was asked", [][]byte{a, b, batchLine(t, key, "c", "1\n", 0, no), errLine}, jobs, "not the verdict"},
		{"a line edited", [][]byte{edit(t, a, func(m map[string]any) { m["exit_code"] = 1 }), b, c, errLine}, jobs, "exit_code"},
		{"another key", [][]byte{batchLine(t, other, "a", "42\n", 0, yes), b, c, errLine}, jobs, ErrUntrustedKey.Error()},
		{"an outcome with no receipt", [][]byte{a, b, c, []byte(`{"job_id":"d","reason":"exited","exit_code":0,"pass":true}`)}, jobs, "no receipt"},
		{"not JSON", [][]byte{a, b, c, errLine, []byte("{")}, nil, "not a JSON object"},
		{"repeated, without jobs", [][]byte{a, a}, nil, "answered on line 1 already"},
	} {
		rep, err := CheckResults(file(tc.lines...), trusting(key.Public().(ed25519.PublicKey)), tc.jobs)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var found bool
		for _, l := range rep.Lines {
			found = found || l.Status == LineNotVerified && strings.Contains(l.Problem, tc.want)
		}
		if tc.want == "missing" {
			found = len(rep.Missing) == 1 && rep.Missing[0] == "b"
		}
		if rep.OK() || !found {
			b, _ := json.MarshalIndent(rep, "", " ")
			t.Errorf("%s: OK %v; want a line not verified naming %q:\n%s", tc.name, rep.OK(), tc.want, b)
		}
	}

	// Without jobs, lines of any jobs verify alone.
	if rep, err := CheckResults(file(a, c), trusting(key.Public().(ed25519.PublicKey)), nil); err != nil || !rep.OK() || rep.Verified != 2 {
		t.Fatalf("without jobs: %+v, %v", rep, err)
	}
	if _, err := CheckResults(failing{}, trusting(key.Public().(ed25519.PublicKey)), nil); err == nil {
		t.Fatal("an unreadable file gave no error")
	}
}

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, errors.New("disk gone") }
