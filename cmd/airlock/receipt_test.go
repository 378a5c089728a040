package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// verifyCmd runs `airlock receipt verify` with args, and returns its
// stdout, its stderr and its exit code.
func verifyCmd(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errw bytes.Buffer
	cmd := newReceiptCmd(&globals{root: t.TempDir()})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetArgs(append([]string{"verify"}, args...))
	cmd.SetOut(&out)
	cmd.SetErr(&errw)
	err := cmd.Execute()
	var ee *exitErr
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.code
	default:
		t.Fatalf("receipt verify %q: %v", args, err)
	}
	return out.String(), errw.String(), code
}

// writeFile writes lines, one a line, to a file in a new directory.
func writeFile(t *testing.T, lines ...[]byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "results.jsonl")
	if err := os.WriteFile(p, append(bytes.Join(lines, []byte("\n")), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReceiptVerifyVersion1: a version 1 receipt verifies alone (exit 0,
// saying what it does not bind), but a results line around one is not
// verified, since nothing of the line is signed: the summary names it,
// --json gives it status "legacy", and the file exits 65.
func TestReceiptVerifyVersion1(t *testing.T) {
	v1, err := os.ReadFile("../../receipt/testdata/v1-receipt.json")
	if err != nil {
		t.Fatal(err)
	}
	var bare struct {
		PublicKey string `json:"public_key"`
	}
	if err := json.Unmarshal(v1, &bare); err != nil {
		t.Fatal(err)
	}
	key := bare.PublicKey

	out, errs, code := verifyCmd(t, "../../receipt/testdata/v1-receipt.json", "--key", key)
	if code != 0 || !strings.Contains(out, "This is a version 1 receipt") {
		t.Errorf("a v1 receipt alone: exit %d\n%s%s", code, out, errs)
	}

	// A made-up line for job a, pass true, around that receipt, and an
	// error line as the runner writes one.
	forged, err := json.Marshal(map[string]any{"job_id": "a", "pass": true, "reason": "exited", "exit_code": 0,
		"stdout": map[string]any{"text": "42\n"}, "receipt": json.RawMessage(bytes.TrimSpace(v1))})
	if err != nil {
		t.Fatal(err)
	}
	results := writeFile(t, forged, []byte(`{"job_id":"b","reason":"error","exit_code":-1,"error":"the engine failed","error_kind":"unavailable"}`))
	out, errs, code = verifyCmd(t, results, "--key", key)
	if code != exitBadReceipt ||
		!strings.Contains(out, "2 lines; 0 verified (0 passed, 0 failed their expected stdout), 1 errors with no receipt, 0 NOT verified, 1 with a version 1 receipt, which binds nothing of its line (NOT verified).") ||
		!strings.Contains(errs, `line 1 (job "a") is NOT verified: its receipt verifies, but it is a version 1 receipt`) {
		t.Errorf("a results line around a v1 receipt: exit %d\n%s%s", code, out, errs)
	}
	out, errs, code = verifyCmd(t, results, "--key", key, "--json")
	var rep struct {
		Lines []struct {
			Status string `json:"status"`
		} `json:"lines"`
		Verified int `json:"verified"`
		Legacy   int `json:"legacy"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitBadReceipt || rep.Verified != 0 || rep.Legacy != 1 ||
		len(rep.Lines) != 2 || rep.Lines[0].Status != "legacy" || rep.Lines[1].Status != "unsigned_error" {
		t.Errorf("--json: exit %d, %v\n%s%s", code, err, out, errs)
	}
}

// TestReceiptVerifyUnsignedKeysAsWritten: a line with no receipt that jq
// reads as exit 0 and reason "exited" (where encoding/json, taking the
// last, case-folded "Reason", would read an error) does not verify.
func TestReceiptVerifyUnsignedKeysAsWritten(t *testing.T) {
	results := writeFile(t,
		[]byte(`{"job_id":"a","reason":"exited","exit_code":0,"stdout":{"text":"42\n"},"Reason":"error","error":"x"}`),
		[]byte(`{"job_id":"b","reason":"error","exit_code":-1,"error":"the engine failed"}`))
	key := "SgrAmQDY577ApZkgRhrB4ZTPdScYaoXV2ONBg9WR4BI=" // any key: no line is signed
	out, errs, code := verifyCmd(t, results, "--key", key)
	if code != exitBadReceipt || !strings.Contains(out, "1 errors with no receipt, 1 NOT verified.") ||
		!strings.Contains(errs, `line 1 (job "a") does NOT verify: keys are read as written: key "Reason" repeats "reason"`) {
		t.Errorf("exit %d\n%s%s", code, out, errs)
	}
}
