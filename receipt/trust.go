package receipt

import (
	"bufio"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"io"
	"strings"
)

// Trust is a set of signers' public keys, each under a name: the airlock
// nodes of a cluster, say, whose keys they publish on their Node objects.
type Trust struct {
	byID  map[string]ed25519.PublicKey
	names map[string]string
}

// ParseTrust reads a trust file: one signer a line, "NAME KEY" or "KEY",
// KEY a base64 ed25519 public key (as a receipt's public_key); blank lines
// and lines starting with '#' are skipped. A line that is neither, or a
// file with no key, is an error naming the line.
func ParseTrust(r io.Reader) (*Trust, error) {
	t := &Trust{byID: map[string]ed25519.PublicKey{}, names: map[string]string{}}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		name, key := "", f[len(f)-1]
		if len(f) == 2 {
			name = f[0]
		}
		pub, err := base64.StdEncoding.DecodeString(key)
		if len(f) > 2 || err != nil || len(pub) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("line %d: want NAME KEY or KEY, KEY a base64 ed25519 public key (32 bytes)", n)
		}
		id := KeyID(pub)
		t.byID[id], t.names[id] = pub, name
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(t.byID) == 0 {
		return nil, fmt.Errorf("no key in it: give one NAME KEY line a signer")
	}
	return t, nil
}

// Key returns the trusted key that signed s, and the signer's name; nil
// when s's key is not trusted.
func (t *Trust) Key(s Signed) (ed25519.PublicKey, string) {
	id := KeyID(s.PublicKey)
	return t.byID[id], t.names[id]
}
