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
	"github.com/airlock-sandbox/airlock/runner"
)

// exitBadReceipt is airlock's exit code when a receipt does not verify.
const exitBadReceipt = 65 // EX_DATAERR

func newReceiptCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "receipt",
		Short: "Verify the signed receipts airlock puts in every result",
	}
	var keyFile, trustFile, jobsFile string
	var asJSON bool
	verify := &cobra.Command{
		Use:   "verify FILE",
		Short: "Check a receipt's signature and say what it proves",
		Long: `Verify the receipt in FILE: the output of 'airlock run --json', one line of
'airlock batch' results, a bare signed receipt, or a whole batch results
file (one result a line). The signature must match,
and by default the signing key must be this host's (under --root/keys);
--key PUBKEY trusts another host's key instead (the base64 public_key from
one of its receipts), and --trust FILE any of the keys FILE lists, one
"NAME KEY" a line, such as the keys a cluster's airlock nodes publish on
their Node objects (docs/kubernetes.md).

Around a Result, every field the receipt covers must agree with it: id,
job_id and pass, image, engine, isolation, the seccomp profile, limits and
policy, reason, exit code, times, every artifact and rejected file, and
stdout and stderr (the bytes carried as text, base64 and tail, and the
totals). image_ref, usage, pool, egress, error, error_kind,
artifacts_dir, quarantine_dir and a rejected file's quarantined name are
not covered. A receipt an airlock node signed for a one-shot pod names the
pod's UID (pod_uid), shown below. Keys are read as written: a key
repeated, or a field's name in another case, does not verify. A version
1 receipt covers only itself.

A results file is checked line by line: each line's receipt must verify
and agree with its line. A line with no receipt is accepted only when it
claims no outcome (reason "error": the job did not run to an end, or was
refused). A line around a version 1 receipt is not verified, since that
receipt binds nothing of its line (verify the receipt alone). With --jobs
JOBS, the batch's jobs file, the results must also answer every job of
JOBS exactly once, no other job, and each verdict (pass) must be the one
on the job's expected_stdout in JOBS: a line removed, repeated, brought
from another batch, or judged on another expected stdout does not
verify. --json prints the per-line report.

Exits 0 when the receipt (or every line) verifies, 65 when it does not.`,
		Example: `  airlock run --json -- python3 -c 'print(1)' > result.json
  airlock receipt verify result.json
  airlock receipt verify results.jsonl --jobs jobs.jsonl
  airlock receipt verify results.jsonl --jobs jobs.jsonl --trust nodes.txt --json`,
		Args: exactArgs(1, "give the file holding the receipt"),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := os.ReadFile(args[0])
			if err != nil {
				return fmt.Errorf("%w: %v", errdefs.ErrNotFound, err)
			}
			keyFor, err := keysFor(g.root, keyFile, trustFile)
			if err != nil {
				return err
			}
			if jobsFile != "" || !json.Valid(b) {
				return verifyResults(cmd, args[0], b, keyFor, jobsFile, asJSON)
			}
			if asJSON {
				return usageError{fmt.Errorf("--json reports on a results file; for one result, drop it")}
			}
			signed, inResult, err := receipt.Find(b)
			if err != nil {
				return fmt.Errorf("%w: no receipt found: %v", errdefs.ErrInvalidArgument, err)
			}
			trusted, signer, err := keyFor(signed)
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
	verify.Flags().StringVar(&jobsFile, "jobs", "", "the batch's jobs file: FILE must answer each of its jobs once, with the verdict on its expected_stdout")
	verify.Flags().BoolVar(&asJSON, "json", false, "print a results file's report as JSON: every line's status, and the counts")
	verify.MarkFlagsMutuallyExclusive("key", "trust")
	cmd.AddCommand(verify)
	return cmd
}

// indent puts each of err's lines on its own indented line.
func indent(err error) string {
	return "  " + strings.ReplaceAll(err.Error(), "\n", "\n  ")
}

// keysFor picks the key each receipt must be signed by: one of --trust's
// (with the signer's name), the one --key gives, or this host's.
func keysFor(root, keyFlag, trustFlag string) (receipt.KeyFor, error) {
	if trustFlag == "" {
		k, err := trustedKey(root, keyFlag)
		if err != nil {
			return nil, err
		}
		return func(receipt.Signed) (ed25519.PublicKey, string, error) { return k, "", nil }, nil
	}
	f, err := os.Open(trustFlag)
	if err != nil {
		return nil, usageError{fmt.Errorf("--trust: %w", err)}
	}
	defer f.Close()
	tr, err := receipt.ParseTrust(f)
	if err != nil {
		return nil, usageError{fmt.Errorf("--trust %s: %w", trustFlag, err)}
	}
	return func(s receipt.Signed) (ed25519.PublicKey, string, error) {
		k, name := tr.Key(s)
		if k == nil {
			return nil, "", fmt.Errorf("%w: signed by key %s, which %s does not list", receipt.ErrUntrustedKey, receipt.KeyID(s.PublicKey), trustFlag)
		}
		return k, cmp.Or(name, receipt.KeyID(k)), nil
	}, nil
}

// verifyResults checks b, the results file path, line by line, and with
// jobsFile against the batch's jobs; it prints the report (as JSON with
// asJSON) and fails with exit 65 unless every line verifies.
func verifyResults(cmd *cobra.Command, path string, b []byte, keyFor receipt.KeyFor, jobsFile string, asJSON bool) error {
	var jobs map[string]*string
	if jobsFile != "" {
		f, err := os.Open(jobsFile)
		if err != nil {
			return usageError{fmt.Errorf("--jobs: %w", err)}
		}
		list, bad, err := runner.ParseJobs(f)
		f.Close()
		if err != nil {
			return usageError{fmt.Errorf("--jobs %s: %w", jobsFile, err)}
		}
		jobs = map[string]*string{}
		for _, j := range list {
			jobs[j.ID] = j.ExpectedStdout
		}
		// An invalid line is answered too, by an error under its line-N id.
		for _, r := range bad {
			jobs[r.JobID] = nil
		}
	}
	rep, err := receipt.CheckResults(bytes.NewReader(b), keyFor, jobs)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	if len(rep.Lines) == 0 {
		return fmt.Errorf("%w: %s holds no result", errdefs.ErrInvalidArgument, path)
	}
	out, errw := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		for _, l := range rep.Lines {
			switch l.Status {
			case receipt.LineNotVerified:
				sayf(errw, "line %d (job %q) does NOT verify: %s", l.Line, l.JobID, l.Problem)
			case receipt.LineUnsignedError:
				sayf(errw, "line %d (job %q) has no receipt: an error, no outcome: %s", l.Line, l.JobID, l.Problem)
			case receipt.LineLegacy:
				sayf(errw, "line %d (job %q) is NOT verified: its receipt verifies, but it is %s", l.Line, l.JobID, l.Problem)
			}
		}
		for _, id := range rep.Missing {
			sayf(errw, "job %q of %s has no line in %s", id, jobsFile, path)
		}
		summary := fmt.Sprintf("%s: %d lines; %d verified (%d passed, %d failed their expected stdout), %d errors with no receipt, %d NOT verified",
			path, len(rep.Lines), rep.Verified, rep.Passed, rep.Failed, rep.UnsignedErrors, rep.NotVerified)
		if rep.Legacy > 0 {
			summary += fmt.Sprintf(", %d with a version 1 receipt, which binds nothing of its line (NOT verified)", rep.Legacy)
		}
		if jobsFile != "" {
			summary += fmt.Sprintf("; %d of %d jobs of %s answered", len(jobs)-len(rep.Missing), len(jobs), jobsFile)
		}
		fmt.Fprintln(out, summary+".")
	}
	if !rep.OK() {
		if !asJSON {
			sayf(errw, "the results do NOT verify")
		}
		return &exitErr{code: exitBadReceipt}
	}
	return nil
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
