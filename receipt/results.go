package receipt

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/airlock-sandbox/airlock/wire"
)

// A batch results file holds one Result a line, each with its job id and
// verdict. CheckResults verifies every line as `receipt verify` does one,
// and, given the batch's jobs, that the file holds exactly one verified
// outcome for each and that each verdict is the one on the job's own
// expected stdout: a line removed, repeated, moved from another batch or
// given another verdict does not pass. A version 1 receipt binds none of
// the line around it: such a line is not verified, though the receipt
// alone still verifies (see Signed.Legacy).

// Line statuses of LineCheck.
const (
	// LineVerified: the receipt verifies and the line agrees with it.
	LineVerified = "verified"
	// LineUnsignedError: a line with no receipt that claims no outcome,
	// only an error (the job did not run to an end, or was refused) or
	// its destruction by another airlock process (reason "destroyed").
	LineUnsignedError = "unsigned_error"
	// LineLegacy: a version 1 receipt that verifies, around which the
	// line is unbound: version 1 signs no job id, verdict or Result, so
	// whatever the line claims is unsigned. It is not verified, and a
	// file with such a line does not verify; the receipt still verifies
	// alone.
	LineLegacy = "legacy"
	// LineNotVerified: anything else; Problem says why.
	LineNotVerified = "not_verified"
)

// LineCheck is the outcome of one line of a results file.
type LineCheck struct {
	Line int `json:"line"`
	// JobID is the signed job id of a verified line, else the line's
	// own, unverified.
	JobID  string `json:"job_id,omitempty"`
	Status string `json:"status"`
	// Pass is a verified line's signed verdict.
	Pass *bool `json:"pass,omitempty"`
	// Signer names the key that signed a verified or legacy line.
	Signer  string `json:"signer,omitempty"`
	Problem string `json:"problem,omitempty"`
}

// ResultsReport is what CheckResults found.
type ResultsReport struct {
	Lines []LineCheck `json:"lines"`
	// Verified, UnsignedErrors, Legacy and NotVerified count the lines
	// of each status; Passed and Failed the verified lines' verdicts.
	Verified       int `json:"verified"`
	UnsignedErrors int `json:"unsigned_errors"`
	Legacy         int `json:"legacy"`
	NotVerified    int `json:"not_verified"`
	Passed         int `json:"passed"`
	Failed         int `json:"failed"`
	// Missing are the jobs given to CheckResults that no line answers.
	Missing []string `json:"missing,omitempty"`
}

// OK reports whether every line verified or is an unsigned error, and
// no job is missing.
func (r ResultsReport) OK() bool {
	return r.NotVerified == 0 && r.Legacy == 0 && len(r.Missing) == 0
}

// KeyFor returns the key a receipt must be signed by and the signer's
// name; an error (ErrUntrustedKey) when no key it trusts signed it.
type KeyFor func(Signed) (ed25519.PublicKey, string, error)

// CheckResults verifies each line of the results file r. keyFor picks
// each receipt's key. jobs, when not nil, are the batch's jobs, each id
// with its expected stdout (nil for none): each must be answered by one
// line, no other job may be, and a verified line's verdict must be the
// one on its job's expected stdout. An error is returned only when r
// cannot be read.
func CheckResults(r io.Reader, keyFor KeyFor, jobs map[string]*string) (ResultsReport, error) {
	var rep ResultsReport
	seen := map[string]int{}
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return rep, fmt.Errorf("reading line %d: %w", n, err)
		}
		if b := bytes.TrimSpace(line); len(b) > 0 {
			c := checkLine(n, b, keyFor, jobs, seen)
			switch c.Status {
			case LineVerified:
				rep.Verified++
				if c.Pass != nil && *c.Pass {
					rep.Passed++
				} else if c.Pass != nil {
					rep.Failed++
				}
			case LineUnsignedError:
				rep.UnsignedErrors++
			case LineLegacy:
				rep.Legacy++
			default:
				rep.NotVerified++
			}
			rep.Lines = append(rep.Lines, c)
		}
		if err != nil {
			break
		}
	}
	for id := range jobs {
		if _, ok := seen[id]; !ok {
			rep.Missing = append(rep.Missing, id)
		}
	}
	slices.Sort(rep.Missing)
	return rep, nil
}

// lineKeys names the keys of a results line that must be spelled as
// written: every key a receipt binds, those checkLine reads of a line
// with no receipt (job_id, pass, reason, error), and the receipt itself.
type lineKeys struct {
	resultJSON
	Receipt json.RawMessage `json:"receipt"`
}

// checkLine checks line n, b; seen maps the jobs answered so far to
// their lines.
func checkLine(n int, b []byte, keyFor KeyFor, jobs map[string]*string, seen map[string]int) LineCheck {
	c := LineCheck{Line: n, Status: LineNotVerified}
	var line struct {
		JobID  string          `json:"job_id"`
		Pass   json.RawMessage `json:"pass"`
		Reason string          `json:"reason"`
		Error  string          `json:"error"`
	}
	if err := json.Unmarshal(b, &line); err != nil {
		c.Problem = fmt.Sprintf("not a JSON object: %v", err)
		return c
	}
	c.JobID = line.JobID
	// Keys are read as written before anything is read of the line, with
	// a receipt or without: encoding/json folds case and keeps the last
	// of a repeated key, so a line jq reads as reason "exited" could read
	// here as an error that claims no outcome.
	if err := wire.CheckKeysFolded(b, lineKeys{}); err != nil {
		c.Problem = fmt.Sprintf("keys are read as written: %v", err)
		return c
	}
	s, inResult, err := Find(b)
	if inResult && errors.Is(err, ErrInvalid) && (line.Reason == "error" || line.Reason == "destroyed") && line.Error != "" && line.Pass == nil {
		// No receipt, and no outcome claimed: it still answers its job.
		c.Status, c.Problem = LineUnsignedError, line.Error
		return answer(c, n, jobs, seen)
	}
	if err != nil {
		c.Problem = err.Error()
		return c
	}
	if !inResult {
		c.Problem = "a bare receipt, not a result line"
		return c
	}
	key, signer, err := keyFor(s)
	if err == nil {
		err = Verify(s, key)
	}
	if err == nil && s.Legacy() {
		// Signed, but around nothing of the line: its job id, verdict
		// and outcome are the line's word alone.
		c.Status, c.Signer = LineLegacy, signer
		c.Problem = "a version 1 receipt, which binds nothing of the line around it (job_id, pass, outcome); verify the receipt alone"
		return c
	}
	if err == nil {
		err = CheckResult(b)
	}
	if err != nil {
		c.Problem = err.Error()
		return c
	}
	rec := s.Receipt
	c.JobID, c.Pass, c.Signer = rec.JobID, rec.Pass, signer
	if jobs != nil {
		exp, ok := jobs[rec.JobID]
		if !ok {
			c.Problem = fmt.Sprintf("job %q is not one of the batch's jobs", rec.JobID)
			return c
		}
		if got, want := rec.Pass, Verdict(rec, exp); !SamePass(got, want) {
			c.Problem = fmt.Sprintf("its verdict (pass %s) is not the verdict on the job's expected stdout (%s)", ShowPass(got), ShowPass(want))
			return c
		}
	}
	c.Status = LineVerified
	return answer(c, n, jobs, seen)
}

// answer records that c answers its job; a job answered before, or none
// of jobs', makes c not verified.
func answer(c LineCheck, n int, jobs map[string]*string, seen map[string]int) LineCheck {
	if first, ok := seen[c.JobID]; ok {
		c.Status, c.Problem = LineNotVerified, fmt.Sprintf("job %q was answered on line %d already", c.JobID, first)
		return c
	}
	if _, ok := jobs[c.JobID]; ok || jobs == nil {
		seen[c.JobID] = n
	}
	return c
}

// Verdict is the verdict a batch gives a run whose receipt is rec on the
// expected stdout exp: exited 0 and wrote exactly exp, within its output
// cap. It is judged on what the receipt signs of stdout (its size and
// sha256), not on the bytes a Result carries, which an airlock node may
// cut to fit a pod's status. Nil when nothing is expected.
func Verdict(rec Receipt, exp *string) *bool {
	if exp == nil {
		return nil
	}
	sum := sha256.Sum256([]byte(*exp))
	out := rec.Stdout
	pass := rec.Reason == "exited" && rec.ExitCode == 0 && out.Bytes <= rec.Policy.Limits.OutputBytes &&
		out.Bytes == int64(len(*exp)) && out.SHA256 == hex.EncodeToString(sum[:])
	return &pass
}

// SamePass reports whether verdicts a and b are the same, none included.
func SamePass(a, b *bool) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }

// ShowPass writes verdict p for a message: true, false or none.
func ShowPass(p *bool) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}
