//go:build e2e

package e2e

import (
	"bufio"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReceiptVerifiesAndTamperingFails(t *testing.T) {
	in := filepath.Join(t.TempDir(), "data.txt")
	os.WriteFile(in, []byte("input bytes\n"), 0o644)
	c := airlock(nil, "run", "--json", "--image", busybox, "--input", in+":/work/data.txt", "--", "sh", "-c", "cat /work/data.txt; echo art > /out/a.txt")
	if c.code != 0 {
		t.Fatalf("run: exit %d %s", c.code, c.stderr)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(c.stdout), &res); err != nil {
		t.Fatal(err)
	}
	rec := res["receipt"].(map[string]any)["receipt"].(map[string]any)
	sum := sha256.Sum256([]byte("input bytes\n"))
	inputs := rec["inputs"].([]any)
	if len(inputs) != 1 || inputs[0].(map[string]any)["sha256"] != hex.EncodeToString(sum[:]) {
		t.Errorf("inputs in the receipt: %v", inputs)
	}
	out := sha256.Sum256([]byte("input bytes\n"))
	if rec["stdout"].(map[string]any)["sha256"] != hex.EncodeToString(out[:]) || len(rec["artifacts"].([]any)) != 1 {
		t.Errorf("receipt: %v", rec)
	}
	if rec["engine"] != engineName || rec["isolation"] != isolationName || rec["runtime_version"] == "unknown" {
		t.Errorf("receipt runtime: %v %v %v", rec["engine"], rec["isolation"], rec["runtime_version"])
	}

	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	os.WriteFile(good, []byte(c.stdout), 0o644)
	v := airlock(nil, "receipt", "verify", good)
	if v.code != 0 || !strings.Contains(v.stdout, "A valid signature proves") || !strings.Contains(v.stdout, "/work/data.txt") {
		t.Errorf("verify: exit %d\n%s%s", v.code, v.stdout, v.stderr)
	}
	for name, tamper := range map[string]func(map[string]any){
		"exit code": func(r map[string]any) { r["exit_code"] = 1.0 },
		"artifact":  func(r map[string]any) { r["artifacts"].([]any)[0].(map[string]any)["sha256"] = strings.Repeat("0", 64) },
		"image":     func(r map[string]any) { r["image"] = "sha256:" + strings.Repeat("1", 64) },
	} {
		var doc map[string]any
		json.Unmarshal([]byte(c.stdout), &doc)
		tamper(doc["receipt"].(map[string]any)["receipt"].(map[string]any))
		b, _ := json.Marshal(doc)
		bad := filepath.Join(dir, "bad.json")
		os.WriteFile(bad, b, 0o644)
		if v := airlock(nil, "receipt", "verify", bad); v.code != 65 || !strings.Contains(v.stderr, "does NOT verify") {
			t.Errorf("tampered %s: exit %d %s", name, v.code, v.stderr)
		}
	}
}

// verifyFile writes doc to a file and runs `airlock receipt verify` on it.
func verifyFile(t *testing.T, doc any) cliResult {
	t.Helper()
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "result.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return airlock(nil, "receipt", "verify", p)
}

// TestReceiptBindsResult edits the Result around an untouched receipt: each
// edit must fail verification and name the field.
func TestReceiptBindsResult(t *testing.T) {
	c := airlock(nil, "run", "--json", "--image", busybox, "--output-limit", "1KiB", "--",
		"sh", "-c", `printf 'err\377\n' >&2; echo art > /out/a.txt; i=0; while [ $i -lt 100 ]; do echo "line $i of the output"; i=$((i+1)); done`)
	var orig map[string]any
	if err := json.Unmarshal([]byte(c.stdout), &orig); err != nil || orig["receipt"] == nil {
		t.Fatalf("run: exit %d, no receipt (%v)\n%s%s", c.code, err, c.stdout, c.stderr)
	}
	if so := orig["stdout"].(map[string]any); so["truncated"] != true || so["tail"] == nil {
		t.Fatalf("stdout should be truncated with a tail: %v", so)
	}
	if se := orig["stderr"].(map[string]any); se["base64"] == nil {
		t.Fatalf("stderr should be base64: %v", se)
	}
	if v := verifyFile(t, orig); v.code != 0 {
		t.Fatalf("untouched result: exit %d\n%s%s", v.code, v.stdout, v.stderr)
	}
	for _, tc := range []struct {
		name, field string
		edit        func(r map[string]any)
	}{
		{"exit code", "exit_code", func(r map[string]any) { r["exit_code"] = 1.0 }},
		{"reason", "reason", func(r map[string]any) { r["reason"] = "timeout" }},
		{"stdout text", "stdout", func(r map[string]any) { r["stdout"].(map[string]any)["text"] = "all good\n" }},
		{"stdout tail", "stdout", func(r map[string]any) { r["stdout"].(map[string]any)["tail"] = "all good\n" }},
		{"stderr base64", "stderr", func(r map[string]any) {
			r["stderr"].(map[string]any)["base64"] = base64.StdEncoding.EncodeToString([]byte("fine\n"))
		}},
		{"artifact sha256", "artifacts[0]", func(r map[string]any) {
			r["artifacts"].([]any)[0].(map[string]any)["sha256"] = strings.Repeat("0", 64)
		}},
		{"limit", "limits", func(r map[string]any) { r["limits"].(map[string]any)["memory_bytes"] = 1e10 }},
		{"image", "image", func(r map[string]any) { r["image"] = "sha256:" + strings.Repeat("1", 64) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var doc map[string]any
			json.Unmarshal([]byte(c.stdout), &doc)
			tc.edit(doc)
			v := verifyFile(t, doc)
			if v.code != 65 || !strings.Contains(v.stderr, tc.field) {
				t.Errorf("exit %d, want 65 naming %s:\n%s%s", v.code, tc.field, v.stdout, v.stderr)
			}
		})
	}
}

// TestReceiptBindsBatchLine swaps the receipts of two batch lines, and
// flips a pass verdict: both must fail verification.
func TestReceiptBindsBatchLine(t *testing.T) {
	dir := t.TempDir()
	jobs, results := filepath.Join(dir, "jobs.jsonl"), filepath.Join(dir, "results.jsonl")
	os.WriteFile(jobs, []byte(`{"id":"a","argv":["echo","same"],"expected_stdout":"same\n"}
{"id":"b","argv":["echo","same"],"expected_stdout":"other\n"}
`), 0o644)
	c := airlock(nil, "batch", jobs, "--out", results, "--engine", engineName, "--isolation", isolationName, "--image", busybox)
	if c.code != 0 && c.code != 1 {
		t.Fatalf("batch: exit %d %s", c.code, c.stderr)
	}
	f, err := os.Open(results)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := map[string]map[string]any{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		lines[l["job_id"].(string)] = l
	}
	a, b := lines["a"], lines["b"]
	if a == nil || b == nil || a["pass"] != true || b["pass"] != false {
		t.Fatalf("results: %v", lines)
	}
	for id, l := range lines {
		if v := verifyFile(t, l); v.code != 0 {
			t.Errorf("untouched line %s: exit %d\n%s%s", id, v.code, v.stdout, v.stderr)
		}
	}
	// Both jobs printed the same bytes, so only the bound job id and
	// verdict tell the receipts apart.
	a["receipt"], b["receipt"] = b["receipt"], a["receipt"]
	for id, l := range map[string]map[string]any{"a": a, "b": b} {
		if v := verifyFile(t, l); v.code != 65 || !strings.Contains(v.stderr, "job_id") {
			t.Errorf("line %s with the other's receipt: exit %d, want 65 naming job_id\n%s%s", id, v.code, v.stdout, v.stderr)
		}
	}
	a["receipt"], b["receipt"] = b["receipt"], a["receipt"]
	b["pass"] = true
	if v := verifyFile(t, b); v.code != 65 || !strings.Contains(v.stderr, "pass") {
		t.Errorf("pass flipped: exit %d, want 65 naming pass\n%s%s", v.code, v.stdout, v.stderr)
	}
}
