package receipt

import (
	"crypto/ed25519"
	"encoding/base64"
	"strings"
	"testing"
)

func TestParseTrust(t *testing.T) {
	pubA, _, _ := ed25519.GenerateKey(nil)
	pubB, _, _ := ed25519.GenerateKey(nil)
	pubC, _, _ := ed25519.GenerateKey(nil)
	b64 := base64.StdEncoding.EncodeToString
	tr, err := ParseTrust(strings.NewReader("# nodes\n\nnode-a " + b64(pubA) + "\n  " + b64(pubB) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if k, name := tr.Key(Signed{PublicKey: pubA}); !k.Equal(pubA) || name != "node-a" {
		t.Errorf("node-a: %v %q", k, name)
	}
	if k, name := tr.Key(Signed{PublicKey: pubB}); !k.Equal(pubB) || name != "" {
		t.Errorf("the unnamed key: %v %q", k, name)
	}
	if k, _ := tr.Key(Signed{PublicKey: pubC}); k != nil {
		t.Errorf("an unlisted key is trusted")
	}
	for _, bad := range []string{"", "# only\n", "a b " + b64(pubA), "node-a notbase64", "node-a " + b64(pubA[:16])} {
		if _, err := ParseTrust(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
