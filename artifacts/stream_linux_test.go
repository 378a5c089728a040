package artifacts

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestCheckStream(t *testing.T) {
	elf := "\x7fELF\x02\x01\x01" + strings.Repeat("\x00", 64)
	for _, tc := range []struct {
		name, body string
		max        int64
		reason     Reason
	}{
		{"result.csv", "a,b\n1,2\n", 1 << 20, ""},
		{"main.py", "print(1)\n", 1 << 20, ""},
		{"tool.txt", elf, 1 << 20, ReasonTypeNotAllowed},
		{"big.txt", strings.Repeat("x", 100), 10, ReasonTooLarge},
		{".env", "A=1\n", 1 << 20, ReasonHiddenName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w bytes.Buffer
			a, rej, err := CheckStream(context.Background(), strings.NewReader(tc.body), tc.name, "/home/user/"+tc.name, &w,
				FileOptions{MaxBytes: tc.max, Types: SessionTypes, SourceText: true})
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.reason == "" && (rej != nil || w.String() != tc.body || a.Size != int64(len(tc.body)) || a.SHA256 == ""):
				t.Errorf("refused or changed: %+v %+v, wrote %d bytes", a, rej, w.Len())
			case tc.reason != "" && (rej == nil || rej.Reason != tc.reason):
				t.Errorf("rejection %+v, want %s", rej, tc.reason)
			case tc.reason == ReasonTypeNotAllowed && w.Len() != 0:
				t.Errorf("a refused type reached the writer: %d bytes", w.Len())
			}
		})
	}
}
