//go:build e2e

package e2e

import (
	"crypto/sha256"
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
