package termsafe

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestWriter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks []string
		want   string
	}{
		{"plain", []string{"hello\tworld\n"}, "hello\tworld\n"},
		{"escape", []string{"\x1b]0;pwned\x07red\x1b[31m"}, `\x1b]0;pwned\x07red\x1b[31m`},
		{"carriage return", []string{"ok\rFAKE"}, `ok\x0dFAKE`},
		{"del and nul", []string{"a\x7fb\x00"}, `a\x7fb\x00`},
		{"c1 csi", []string{"a\xc2\x9b31m"}, `a\u009b31m`},
		{"c1 split", []string{"a\xc2", "\x9b31m"}, `a\u009b31m`},
		{"latin1 kept", []string{"caf\xc3\xa9 \xc2\xa0nbsp"}, "caf\xc3\xa9 \xc2\xa0nbsp"},
		{"c2 split kept", []string{"\xc2", "\xa0"}, "\xc2\xa0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := New(&buf)
			for _, c := range tc.chunks {
				if n, err := w.Write([]byte(c)); err != nil || n != len(c) {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			w.Flush()
			if buf.String() != tc.want {
				t.Errorf("got %q, want %q", buf.String(), tc.want)
			}
		})
	}
}

func FuzzWriter(f *testing.F) {
	f.Add([]byte("\x1b[2J\xc2\x9b\r\n"), 3)
	f.Fuzz(func(t *testing.T, p []byte, split int) {
		var buf bytes.Buffer
		w := New(&buf)
		if split < 0 || split > len(p) {
			split = len(p) / 2
		}
		w.Write(p[:split])
		w.Write(p[split:])
		w.Flush()
		for i, b := range buf.Bytes() {
			if b < 0x20 && b != '\n' && b != '\t' || b == 0x7f {
				t.Fatalf("control byte %#x at %d in %q", b, i, buf.Bytes())
			}
			if b == 0xc2 && i+1 < buf.Len() && buf.Bytes()[i+1] >= 0x80 && buf.Bytes()[i+1] <= 0x9f {
				t.Fatalf("C1 control at %d in %q", i, buf.Bytes())
			}
		}
	})
}

func TestJSONEscapesC1(t *testing.T) {
	v := map[string]string{"text": "a\u009b31mred\u0085é\u00a0z"}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	got := JSON(b)
	for c := 0x80; c <= 0x9f; c++ {
		if bytes.Contains(got, []byte{0xC2, byte(c)}) {
			t.Fatalf("raw C1 U+%04X left in %q", c, got)
		}
	}
	var back map[string]string
	if err := json.Unmarshal(got, &back); err != nil || back["text"] != v["text"] {
		t.Errorf("%q decodes to %q (%v), want %q", got, back["text"], err, v["text"])
	}
	if plain := []byte(`{"a":"é"}`); !bytes.Equal(JSON(plain), plain) {
		t.Error("changed JSON with no C1 in it")
	}
}
