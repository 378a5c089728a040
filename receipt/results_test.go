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
		// Keys are read as written on a line with no receipt too: jq reads
		// this one as reason "exited", exit 0, stdout "42\n", where
		// encoding/json takes the last, case-folded "Reason": an error.
		{"no receipt, a reason repeated in another case", [][]byte{a, b, c, []byte(`{"job_id":"d","reason":"exited","exit_code":0,"stdout":{"text":"42\n","bytes":3},"Reason":"error","error":"x"}`)}, jobs, `key "Reason" repeats "reason"`},
		// jq reads no error here; encoding/json would read "x".
		{"no receipt, error in another case", [][]byte{a, b, c, []byte(`{"job_id":"d","reason":"error","Error":"x"}`)}, jobs, `key "Error" is not "error"`},
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

// TestCheckResultsUnsignedError: a line with no receipt answers its job
// when it claims no outcome (reason "error", its error, no pass), whatever
// else the runner kept of a run that failed after its program ended (here
// its receipt could not be signed): the exit code, stdout, usage and
// delivery directories stay on the line, unverified.
func TestCheckResultsUnsignedError(t *testing.T) {
	line := []byte(`{"job_id":"d","id":"run-d","image":"sha256:aa","engine":"oci","reason":"error","exit_code":0,` +
		`"stdout":{"text":"42\n","bytes":3,"sha256":"` + hash("42\n") + `"},"usage":{"cpu_ms":3,"memory_peak_bytes":1,"pids_peak":1},` +
		`"artifacts_dir":"/out/run-d","quarantine_dir":"/q/run-d","error":"signing the receipt: disk full","error_kind":"internal"}`)
	key := newKey(t)
	rep, err := CheckResults(bytes.NewReader(append(line, '\n')), trusting(key.Public().(ed25519.PublicKey)), map[string]*string{"d": nil})
	if err != nil || !rep.OK() || rep.UnsignedErrors != 1 || rep.Lines[0].Problem != "signing the receipt: disk full" {
		t.Errorf("an error line as the runner writes it: %+v, %v", rep, err)
	}
}

// TestCheckResultsVersion1: a version 1 receipt binds nothing of the line
// around it, so a line made up around any version 1 receipt the trusted
// key ever signed (job "a", pass true, exit 0) is not verified: it is
// "legacy", and the file does not verify. A version 1 receipt whose
// signature fails is not verified at all.
func TestCheckResultsVersion1(t *testing.T) {
	b, s := readVersion1(t)
	pub := ed25519.PublicKey(s.PublicKey)
	lineAround := func(rec []byte) []byte {
		line, err := json.Marshal(map[string]any{"job_id": "a", "pass": true, "reason": "exited", "exit_code": 0,
			"stdout": map[string]any{"text": "42\n"}, "receipt": json.RawMessage(bytes.TrimSpace(rec))})
		if err != nil {
			t.Fatal(err)
		}
		return append(line, '\n')
	}
	for _, jobs := range []map[string]*string{nil, {"a": nil}} {
		rep, err := CheckResults(bytes.NewReader(lineAround(b)), trusting(pub), jobs)
		if err != nil {
			t.Fatal(err)
		}
		l := rep.Lines[0]
		if rep.OK() || rep.Verified != 0 || rep.Legacy != 1 || l.Status != LineLegacy || l.Pass != nil || l.Signer != "host" ||
			!strings.Contains(l.Problem, "version 1") {
			t.Errorf("jobs %v: a line around a v1 receipt: %+v", jobs, rep)
		}
		if jobs != nil && (len(rep.Missing) != 1 || rep.Missing[0] != "a") {
			t.Errorf("a line around a v1 receipt answers job a: %+v", rep)
		}
	}
	tampered := bytes.Replace(b, []byte(`"exit_code": 0`), []byte(`"exit_code": 1`), 1)
	rep, err := CheckResults(bytes.NewReader(lineAround(tampered)), trusting(pub), nil)
	if err != nil || rep.NotVerified != 1 || rep.Legacy != 0 || !strings.Contains(rep.Lines[0].Problem, ErrBadSignature.Error()) {
		t.Errorf("a tampered v1 receipt: %+v, %v", rep, err)
	}
}

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, errors.New("disk gone") }

// A line of a run another airlock process destroyed, as the runner
// writes it (no receipt, no verdict), is an unsigned error; with a
// verdict it is not verified.
func TestCheckResultsDestroyed(t *testing.T) {
	line := `{"job_id":"d","id":"run-d","reason":"destroyed","exit_code":137,"error":"another airlock process destroyed the run"}`
	rep, err := CheckResults(strings.NewReader(line+"\n"), nil, map[string]*string{"d": nil})
	if err != nil || !rep.OK() || rep.UnsignedErrors != 1 {
		t.Errorf("a destroyed run's line: %+v, %v", rep, err)
	}
	withPass := strings.Replace(line, `"reason"`, `"pass":true,"reason"`, 1)
	if rep, err := CheckResults(strings.NewReader(withPass+"\n"), nil, nil); err != nil || rep.OK() || rep.NotVerified != 1 {
		t.Errorf("a destroyed run's line claiming a verdict: %+v, %v", rep, err)
	}
}
