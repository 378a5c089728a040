package receipt

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
)

// KeyFile is the signing key's name inside the key directory.
const KeyFile = "receipt.key"

const pemType = "PRIVATE KEY"

// LoadOrCreateKey returns the signing key in <dir>/receipt.key, creating
// the directory (0700) and the key (0600) on first use. The key is written
// to a temporary file and linked to its final name, so the name never shows
// a partial key and, of concurrent creators, exactly one wins and the rest
// load its key. A key file or directory that others can read or write is an
// error, as is a key file that does not parse: it is never replaced.
func LoadOrCreateKey(dir string) (ed25519.PrivateKey, error) {
	path := filepath.Join(dir, KeyFile)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating key directory %q: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("checking key directory %q: %w", dir, err)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("checking key directory %q: mode %04o lets others replace the key; run: chmod 700 %q", dir, fi.Mode().Perm(), dir)
	}
	key, err := loadKey(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	if err := createKey(path); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	// Ours or a concurrent creator's: either way, complete.
	return loadKey(path)
}

func loadKey(path string) (ed25519.PrivateKey, error) {
	// Stat first: opening a FIFO would block.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("loading key %q: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("loading key %q: not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("loading key %q: %w", path, err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, fmt.Errorf("loading key %q: %w", path, err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("loading key %q: mode %04o lets others read the key; run: chmod 600 %q", path, perm, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("loading key %q: %w", path, err)
	}
	block, rest := pem.Decode(data)
	if block == nil || block.Type != pemType || len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("loading key %q: want exactly one PEM %q block", path, pemType)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("loading key %q: %w", path, err)
	}
	key, ok := parsed.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("loading key %q: a %T, want ed25519", path, parsed)
	}
	return key, nil
}

// createKey writes a new key beside path and links it into place. It
// returns an error wrapping fs.ErrExist when another creator got there
// first.
func createKey(path string) error {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("creating key %q: %w", path, err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("creating key %q: %w", path, err)
	}
	data := pem.EncodeToMemory(&pem.Block{Type: pemType, Bytes: der})

	// One creator wins; the others get fs.ErrExist and load the winner's.
	return atomicfile.Create(path, data, 0o600)
}
