package receipt

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// resultSample is a receipt whose streams exercise every shape a Result
// carries: stdout truncated with a character split at both cuts, stderr
// not UTF-8.
func resultSample() Receipt {
	r := sample()
	r.JobID, r.Pass = "job-1", new(false)
	r.Stdout = StreamOf(hash("all of stdout"), 100, true, []byte("ab\xc3"), []byte("\xa9cd"))
	r.Stderr = StreamOf(hash("err\xff\n"), 5, false, []byte("err\xff\n"), nil)
	r.Rejected = []Rejection{{Path: "x.sh", Reason: "type_not_allowed", Detail: "text/x-shellscript"}}
	r.Snapshot = hash("a snapshot's manifest")
	return r
}

// resultOf writes the Result a runner would write around s, as the
// runner's JSON encoder shapes it.
func resultOf(t *testing.T, s Signed) []byte {
	t.Helper()
	r := s.Receipt
	files := []map[string]any{}
	for _, a := range r.Artifacts {
		files = append(files, map[string]any{"path": a.Path, "size": a.Size, "sha256": a.SHA256, "mime": a.MIME})
	}
	res := map[string]any{
		"job_id": r.JobID, "pass": r.Pass,
		"id": r.RunID, "snapshot": r.Snapshot, "image": r.Image, "image_ref": "busybox@" + r.Image, "engine": r.Engine, "isolation": r.Isolation,
		"seccomp_profile_sha256": r.SeccompSHA256, "reason": r.Reason, "exit_code": r.ExitCode,
		"duration_ms": r.FinishedAt.Sub(r.StartedAt).Milliseconds(),
		"stdout": map[string]any{
			"base64": base64.StdEncoding.EncodeToString([]byte("ab\xc3")), "text": "ab",
			"tail_base64": base64.StdEncoding.EncodeToString([]byte("\xa9cd")), "tail": "cd",
			"bytes": 100, "truncated": true, "sha256": r.Stdout.SHA256, "omitted_bytes": 94,
		},
		"stderr": map[string]any{
			"base64": base64.StdEncoding.EncodeToString([]byte("err\xff\n")),
			"bytes":  5, "truncated": false, "sha256": r.Stderr.SHA256,
		},
		"limits": r.Policy.Limits, "policy": r.Policy,
		"usage":     map[string]any{"cpu_ms": 10},
		"artifacts": files, "rejected": r.Rejected,
		"started_at": r.StartedAt, "finished_at": r.FinishedAt,
		"receipt": s,
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func edit(t *testing.T, b []byte, f func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	f(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func obj(m map[string]any, key string) map[string]any { return m[key].(map[string]any) }

func TestCheckResult(t *testing.T) {
	key := newKey(t)
	s, err := Sign(key, resultSample())
	if err != nil {
		t.Fatal(err)
	}
	good := resultOf(t, s)
	if err := CheckResult(good); err != nil {
		t.Fatalf("untouched result: %v", err)
	}
	other := resultSample()
	other.JobID, other.RunID = "job-2", "run-2"
	s2, err := Sign(key, other)
	if err != nil {
		t.Fatal(err)
	}
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, tc := range []struct {
		name, want string
		edit       func(m map[string]any)
	}{
		{"exit code", "exit_code: the result says 1, the receipt 0", func(m map[string]any) { m["exit_code"] = 1 }},
		{"exit code removed", "exit_code: the result says null", func(m map[string]any) { delete(m, "exit_code") }},
		{"reason", `reason: the result says "timeout", the receipt "exited"`, func(m map[string]any) { m["reason"] = "timeout" }},
		{"image", "image:", func(m map[string]any) { m["image"] = "sha256:" + hash("other") }},
		{"engine", "engine:", func(m map[string]any) { m["engine"] = "docker" }},
		{"snapshot", "snapshot:", func(m map[string]any) { m["snapshot"] = hash("another snapshot") }},
		{"snapshot removed", "snapshot:", func(m map[string]any) { delete(m, "snapshot") }},
		{"isolation", "isolation:", func(m map[string]any) { m["isolation"] = "seccomp" }},
		{"seccomp", "seccomp_profile_sha256:", func(m map[string]any) { m["seccomp_profile_sha256"] = hash("x") }},
		{"error added", "error:", func(m map[string]any) { m["error"] = "boom" }},
		{"duration", "duration_ms:", func(m map[string]any) { m["duration_ms"] = 1 }},
		{"started", "started_at:", func(m map[string]any) { m["started_at"] = time.Now() }},
		{"stdout text", "stdout.text", func(m map[string]any) { obj(m, "stdout")["text"] = "all good" }},
		{"stdout base64", "stdout.text", func(m map[string]any) { obj(m, "stdout")["base64"] = b64("xy\xc3") }},
		{"stdout text only", "stdout.text", func(m map[string]any) { delete(obj(m, "stdout"), "base64"); obj(m, "stdout")["text"] = "ab" }},
		{"stdout tail", "stdout.tail", func(m map[string]any) { obj(m, "stdout")["tail"] = "zz" }},
		{"stdout tail base64", "stdout.tail", func(m map[string]any) { obj(m, "stdout")["tail_base64"] = b64("\xa9zz") }},
		{"stdout bytes", "stdout.bytes", func(m map[string]any) { obj(m, "stdout")["bytes"] = 6 }},
		{"stdout omitted", "stdout.omitted_bytes", func(m map[string]any) { obj(m, "stdout")["omitted_bytes"] = 0 }},
		{"stdout sha256", "stdout.sha256", func(m map[string]any) { obj(m, "stdout")["sha256"] = hash("x") }},
		{"stdout truncated", "stdout.truncated", func(m map[string]any) { obj(m, "stdout")["truncated"] = false }},
		{"stderr base64", "stderr.text", func(m map[string]any) { obj(m, "stderr")["base64"] = b64("fine\xff\n") }},
		{"stderr as text", "stderr.text", func(m map[string]any) { delete(obj(m, "stderr"), "base64"); obj(m, "stderr")["text"] = "fine\n" }},
		{"stderr text beside base64", "stderr.text", func(m map[string]any) { obj(m, "stderr")["text"] = "err" }},
		{"stderr tail added", "stderr.tail", func(m map[string]any) { obj(m, "stderr")["tail"] = "more" }},
		{"artifact sha256", "artifacts[1].sha256", func(m map[string]any) {
			m["artifacts"].([]any)[1].(map[string]any)["sha256"] = hash("forged")
		}},
		{"artifact path", "artifacts[0].path", func(m map[string]any) { m["artifacts"].([]any)[0].(map[string]any)["path"] = "r.pdf" }},
		{"artifact size", "artifacts[0].size", func(m map[string]any) { m["artifacts"].([]any)[0].(map[string]any)["size"] = 1 }},
		{"artifact mime", "artifacts[0].mime", func(m map[string]any) { m["artifacts"].([]any)[0].(map[string]any)["mime"] = "text/plain" }},
		{"artifact dropped", "artifacts:", func(m map[string]any) { m["artifacts"] = m["artifacts"].([]any)[:1] }},
		{"rejection dropped", "rejected:", func(m map[string]any) { m["rejected"] = []any{} }},
		{"rejection reason", "rejected[0].reason", func(m map[string]any) { m["rejected"].([]any)[0].(map[string]any)["reason"] = "too_large" }},
		{"limit", "limits.memory_bytes: the result says 1e+10, the receipt 5.36870912e+08", func(m map[string]any) { obj(m, "limits")["memory_bytes"] = 1e10 }},
		{"cpus", "limits.cpus", func(m map[string]any) { obj(m, "limits")["cpus"] = 4 }},
		{"limit removed", "limits.open_files", func(m map[string]any) { delete(obj(m, "limits"), "open_files") }},
		{"policy", "policy.mounts[0].mode", func(m map[string]any) { obj(m, "policy")["mounts"].([]any)[0].(map[string]any)["mode"] = "rw" }},
		{"policy removed", "policy:", func(m map[string]any) { delete(m, "policy") }},
		{"job id", `job_id: the result says "job-9", the receipt "job-1"`, func(m map[string]any) { m["job_id"] = "job-9" }},
		{"pass flipped", "pass: the result says true, the receipt false", func(m map[string]any) { m["pass"] = true }},
		{"pass removed", "pass: the result says null, the receipt false", func(m map[string]any) { delete(m, "pass") }},
		{"receipt of another job", "job_id:", func(m map[string]any) {
			var r any
			json.Unmarshal(resultOf(t, s2), &r)
			m["receipt"] = r.(map[string]any)["receipt"]
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckResult(edit(t, good, tc.edit))
			if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CheckResult = %v, want a mismatch saying %q", err, tc.want)
			}
		})
	}
	// Fields the receipt does not cover may change.
	if err := CheckResult(edit(t, good, func(m map[string]any) { m["usage"] = nil; m["image_ref"] = "x" })); err != nil {
		t.Errorf("unbound fields: %v", err)
	}
	// Outside a batch, there is no job id or verdict on either side.
	plain := resultSample()
	plain.JobID, plain.Pass = "", nil
	s3, err := Sign(key, plain)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckResult(edit(t, resultOf(t, s3), func(m map[string]any) { delete(m, "job_id"); delete(m, "pass") })); err != nil {
		t.Errorf("run result: %v", err)
	}
	if err := CheckResult(edit(t, resultOf(t, s3), func(m map[string]any) { m["job_id"] = "job-1" })); !errors.Is(err, ErrMismatch) {
		t.Errorf("a run's receipt on a batch line: %v", err)
	}
}

func TestFind(t *testing.T) {
	s, err := Sign(newKey(t), resultSample())
	if err != nil {
		t.Fatal(err)
	}
	var bare bytes.Buffer
	if err := s.Write(&bare); err != nil {
		t.Fatal(err)
	}
	got, inResult, err := Find(bare.Bytes())
	if err != nil || inResult || Verify(got, nil) != nil {
		t.Errorf("bare receipt: in result %v, %v, verify %v", inResult, err, Verify(got, nil))
	}
	// A bare receipt has no Result to disagree with.
	if err := CheckResult(bare.Bytes()); err != nil {
		t.Errorf("CheckResult(bare) = %v", err)
	}
	got, inResult, err = Find(resultOf(t, s))
	if err != nil || !inResult || Verify(got, nil) != nil {
		t.Errorf("result: in result %v, %v", inResult, err)
	}
	for name, in := range map[string]string{
		"no receipt":   `{"id":"r","exit_code":0}`,
		"null receipt": `{"id":"r","receipt":null}`,
		"not JSON":     `receipt`,
		"array":        `[]`,
	} {
		if _, _, err := Find([]byte(in)); !errors.Is(err, ErrInvalid) {
			t.Errorf("Find(%s) = %v, want ErrInvalid", name, err)
		}
	}
}

// readVersion1 reads testdata's version 1 receipt: its bytes, and as read.
func readVersion1(t *testing.T) ([]byte, Signed) {
	t.Helper()
	b, err := os.ReadFile("testdata/v1-receipt.json")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Read(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return b, s
}

// A version 1 receipt, signed by the version 1 code, still verifies, alone,
// and says what it does not bind.
func TestVersion1(t *testing.T) {
	b, s := readVersion1(t)
	if err := Verify(s, nil); err != nil {
		t.Fatalf("Verify(v1) = %v", err)
	}
	if !s.Legacy() || s.Receipt.Version != 1 || s.Receipt.Policy.Limits.MilliCPUs != 1000 {
		t.Errorf("read as %+v", s.Receipt)
	}
	if got := s.Explain(); !strings.Contains(got, "version 1 receipt") || !strings.Contains(got, "flags --network=none --oci-seccomp") {
		t.Errorf("Explain:\n%s", got)
	}
	// Written back, it is byte for byte the receipt that was signed.
	var again bytes.Buffer
	if err := s.Write(&again); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Bytes(), b) {
		t.Errorf("Write(Read(v1)) differs:\n%s", again.Bytes())
	}
	s.Receipt.ExitCode = 3
	if err := Verify(s, nil); !errors.Is(err, ErrBadSignature) {
		t.Errorf("v1 changed after reading: %v", err)
	}
	tampered := bytes.Replace(b, []byte(`"exit_code": 0`), []byte(`"exit_code": 1`), 1)
	if s, err := Read(bytes.NewReader(tampered)); err != nil || !errors.Is(Verify(s, nil), ErrBadSignature) {
		t.Errorf("tampered v1: %v, %v", err, Verify(s, nil))
	}
	// Version 1 receipts bind no Result: CheckResult has nothing to hold
	// the Result to.
	res, _ := json.Marshal(map[string]any{"exit_code": 7, "receipt": json.RawMessage(b)})
	if err := CheckResult(res); err != nil {
		t.Errorf("CheckResult(v1) = %v", err)
	}
}

// TestKeysReadAsWritten: a key repeated in another case, which
// encoding/json would take (the last wins) while jq and Python read the
// first as written, fails verification, in a Result and in the signed
// receipt; so does a field's name in another case alone.
func TestKeysReadAsWritten(t *testing.T) {
	s, err := Sign(newKey(t), resultSample())
	if err != nil {
		t.Fatal(err)
	}
	res := resultOf(t, s)
	for name, forged := range map[string][]byte{
		"a repeated key":          bytes.Replace(res, []byte(`"exit_code":0,`), []byte(`"exit_code":1,"Exit_Code":0,`), 1),
		"a key in another case":   bytes.Replace(res, []byte(`"exit_code":0,`), []byte(`"EXIT_CODE":0,`), 1),
		"a repeated key, unicode": bytes.Replace(res, []byte(`"reason":`), []byte(`"reaſon":"timeout","reason":`), 1),
	} {
		if bytes.Equal(forged, res) {
			t.Fatalf("%s: the forgery changed nothing", name)
		}
		if err := CheckResult(forged); err == nil {
			t.Errorf("%s: the Result checks", name)
		}
	}
	var buf bytes.Buffer
	if err := s.Write(&buf); err != nil {
		t.Fatal(err)
	}
	forged := bytes.Replace(buf.Bytes(), []byte(`"exit_code": 0,`), []byte(`"exit_code": 1, "EXIT_CODE": 0,`), 1)
	if bytes.Equal(forged, buf.Bytes()) {
		t.Fatal("the receipt's forgery changed nothing")
	}
	if got, err := Read(bytes.NewReader(forged)); err == nil && Verify(got, s.PublicKey) == nil {
		t.Error("a receipt with a second, case-folded exit_code reads and verifies")
	}
}
