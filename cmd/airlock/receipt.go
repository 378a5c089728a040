package main

import (
	"bytes"
	"cmp"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/receipt"
)

// exitBadReceipt is airlock's exit code when a receipt does not verify.
const exitBadReceipt = 65 // EX_DATAERR

func newReceiptCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "receipt",
		Short: "Verify the signed receipts airlock puts in every result",
	}
	var keyFile, trustFile string
	verify := &cobra.Command{
		Use:   "verify FILE",
		Short: "Check a receipt's signature and say what it proves",
		Long: `Verify the receipt in FILE: the output of 'airlock run --json', one line of
'airlock batch' results, or a bare signed receipt. The signature must match,
and by default the signing key must be this host's (under --root/keys);
--key PUBKEY trusts another host's key instead (the base64 public_key from
one of its receipts), and --trust FILE any of the keys FILE lists, one
"NAME KEY" a line, such as the keys a cluster's airlock nodes publish on
their Node objects (docs/kubernetes.md).

Around a Result, every field the receipt covers must agree with it: id,
job_id and pass, image, engine, isolation, the seccomp profile, limits and
policy, reason, exit code, times, every artifact and rejected file, and
stdout and stderr (the bytes carried as text, base64 and tail, and the
totals). image_ref, usage, pool, egress, error and error_kind are not
covered. A receipt an airlock node signed for a one-shot pod names the
pod's UID (pod_uid), shown below. Keys are read as written: a key
repeated, or a field's name in another case, does not verify. A version
1 receipt covers only itself. Exits 0 when the receipt verifies, 65 when it does not.`,
		Args: exactArgs(1, "give the file holding the receipt"),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := os.ReadFile(args[0])
			if err != nil {
				return fmt.Errorf("%w: %v", errdefs.ErrNotFound, err)
			}
			signed, inResult, err := receipt.Find(b)
			if err != nil {
				return fmt.Errorf("%w: no receipt found: %v", errdefs.ErrInvalidArgument, err)
			}
			trusted, signer, err := trustedFor(signed, g.root, keyFile, trustFile)
			if errors.Is(err, receipt.ErrUntrustedKey) {
				sayf(cmd.ErrOrStderr(), "receipt does NOT verify: %v", err)
				return &exitErr{code: exitBadReceipt}
			}
			if err != nil {
				return err
			}
			if err := receipt.Verify(signed, trusted); err != nil {
				sayf(cmd.ErrOrStderr(), "receipt does NOT verify: %v", err)
				return &exitErr{code: exitBadReceipt}
			}
			if inResult {
				if err := receipt.CheckResult(b); err != nil {
					sayf(cmd.ErrOrStderr(), "the result does NOT verify: it disagrees with its signed receipt:\n%s", indent(err))
					return &exitErr{code: exitBadReceipt}
				}
			}
			if signer != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "Signed by %s, a key of %s.\n", signer, trustFile)
			}
			fmt.Fprintln(cmd.OutOrStdout(), signed.Explain())
			return nil
		},
	}
	verify.Flags().StringVar(&keyFile, "key", "", "trust this public key (base64, or a file holding it) instead of this host's")
	verify.Flags().StringVar(&trustFile, "trust", "", "trust the keys this file lists, NAME KEY a line (a cluster's airlock nodes; see docs/kubernetes.md)")
	verify.MarkFlagsMutuallyExclusive("key", "trust")
	cmd.AddCommand(verify)
	return cmd
}

// indent puts each of err's lines on its own indented line.
func indent(err error) string {
	return "  " + strings.ReplaceAll(err.Error(), "\n", "\n  ")
}

// trustedFor is the key s must be signed by: one of --trust's, the one
// --key gives, or this host's; with --trust, the signer's name too.
func trustedFor(s receipt.Signed, root, keyFlag, trustFlag string) (ed25519.PublicKey, string, error) {
	if trustFlag == "" {
		k, err := trustedKey(root, keyFlag)
		return k, "", err
	}
	f, err := os.Open(trustFlag)
	if err != nil {
		return nil, "", usageError{fmt.Errorf("--trust: %w", err)}
	}
	defer f.Close()
	tr, err := receipt.ParseTrust(f)
	if err != nil {
		return nil, "", usageError{fmt.Errorf("--trust %s: %w", trustFlag, err)}
	}
	k, name := tr.Key(s)
	if k == nil {
		return nil, "", fmt.Errorf("%w: signed by key %s, which %s does not list", receipt.ErrUntrustedKey, receipt.KeyID(s.PublicKey), trustFlag)
	}
	return k, cmp.Or(name, receipt.KeyID(k)), nil
}

func trustedKey(root, flag string) (ed25519.PublicKey, error) {
	if flag != "" {
		v := flag
		if b, err := os.ReadFile(flag); err == nil {
			v = string(bytes.TrimSpace(b))
		}
		var pub []byte
		if err := json.Unmarshal([]byte(`"`+v+`"`), &pub); err != nil || len(pub) != ed25519.PublicKeySize {
			return nil, usageError{fmt.Errorf("--key: want a base64 ed25519 public key (32 bytes), as in a receipt's public_key")}
		}
		return pub, nil
	}
	if _, err := os.Stat(filepath.Join(root, "keys", receipt.KeyFile)); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: this host has no receipt key under %s; pass --key with the signer's public key", errdefs.ErrNotFound, filepath.Join(root, "keys"))
	}
	key, err := receipt.LoadOrCreateKey(filepath.Join(root, "keys"))
	if err != nil {
		return nil, err
	}
	return key.Public().(ed25519.PublicKey), nil
}
