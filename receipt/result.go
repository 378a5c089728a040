package receipt

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// ErrMismatch is matched by every Mismatch.
var ErrMismatch = errors.New("result does not match its receipt")

// Mismatch is one field where a Result disagrees with its receipt.
type Mismatch struct {
	// Field is the Result's JSON path: "exit_code", "stdout.text",
	// "artifacts[0].sha256".
	Field string
	// Result and Receipt are the two values, shown for people.
	Result, Receipt string
	// Detail replaces the two values when the Result is malformed.
	Detail string
}

func (m *Mismatch) Error() string {
	if m.Detail != "" {
		return m.Field + ": " + m.Detail
	}
	return m.Field + ": the result says " + m.Result + ", the receipt " + m.Receipt
}

// Is makes every Mismatch match ErrMismatch.
func (m *Mismatch) Is(target error) bool { return target == ErrMismatch }

func mismatch(field string, result, receipt any) error {
	return &Mismatch{Field: field, Result: val(result), Receipt: val(receipt)}
}

// Find returns the signed receipt in b: a bare signed receipt, or a Result
// (`airlock run --json`, one line of `airlock batch` results) carrying one.
// inResult reports the latter: check those with CheckResult as well.
func Find(b []byte) (s Signed, inResult bool, err error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return Signed{}, false, fmt.Errorf("%w: not a JSON object: %w", ErrInvalid, err)
	}
	// A bare receipt has "receipt" holding the receipt body, beside
	// "signature"; a Result has "receipt" holding the whole signed receipt.
	if _, bare := top["signature"]; bare {
		s, err = Read(bytes.NewReader(b))
		return s, false, err
	}
	raw, ok := top["receipt"]
	if !ok || string(raw) == "null" {
		return Signed{}, true, fmt.Errorf("%w: the result carries no receipt (a run that failed or was destroyed has none)", ErrInvalid)
	}
	s, err = Read(bytes.NewReader(raw))
	return s, true, err
}

// resultJSON is what CheckResult reads of a Result or batch result line:
// every field a receipt binds. Fields it does not name (image_ref, usage)
// are not bound.
type resultJSON struct {
	JobID      *string         `json:"job_id"`
	Pass       *bool           `json:"pass"`
	ID         string          `json:"id"`
	SandboxID  string          `json:"sandbox_id"`
	Snapshot   string          `json:"snapshot"`
	Image      string          `json:"image"`
	Engine     string          `json:"engine"`
	Isolation  string          `json:"isolation"`
	Seccomp    string          `json:"seccomp_profile_sha256"`
	Reason     string          `json:"reason"`
	ExitCode   *int            `json:"exit_code"`
	DurationMS int64           `json:"duration_ms"`
	Stdout     streamJSON      `json:"stdout"`
	Stderr     streamJSON      `json:"stderr"`
	Limits     json.RawMessage `json:"limits"`
	Policy     json.RawMessage `json:"policy"`
	Artifacts  []File          `json:"artifacts"`
	Rejected   []Rejection     `json:"rejected"`
	StartedAt  time.Time       `json:"started_at"`
	FinishedAt time.Time       `json:"finished_at"`
	Error      string          `json:"error"`
	ErrorKind  string          `json:"error_kind"`
}

// streamJSON is a Result's stream: see runner.Stream's MarshalJSON.
type streamJSON struct {
	Text         *string `json:"text"`
	Base64       *string `json:"base64"`
	Tail         *string `json:"tail"`
	TailBase64   *string `json:"tail_base64"`
	Bytes        int64   `json:"bytes"`
	Truncated    bool    `json:"truncated"`
	SHA256       string  `json:"sha256"`
	OmittedBytes *int64  `json:"omitted_bytes"`
}

// CheckResult reports every field of the Result b (JSON, as `airlock run
// --json` or `airlock batch` write it) that disagrees with the receipt it
// carries, each naming the field: "exit_code: the result says 1, the
// receipt 0". It does not check the signature: call Verify too. A version
// 1 receipt binds no Result: CheckResult accepts any Result around one
// (see Signed.Legacy).
func CheckResult(b []byte) error {
	s, inResult, err := Find(b)
	if err != nil {
		return err
	}
	if !inResult || s.Legacy() {
		return nil
	}
	var res resultJSON
	if err := exactKeys(b, res); err != nil {
		return &Mismatch{Field: "(the result)", Detail: err.Error()}
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return &Mismatch{Field: "(the result)", Detail: err.Error()}
	}
	r := s.Receipt
	var errs []error
	differ := func(field string, result, receipt any) {
		errs = append(errs, mismatch(field, result, receipt))
	}
	same := func(field string, result, receipt any) {
		if result != receipt {
			differ(field, result, receipt)
		}
	}
	jobID := ""
	if res.JobID != nil {
		jobID = *res.JobID
	}
	same("job_id", jobID, r.JobID)
	if !equalPtr(res.Pass, r.Pass) {
		differ("pass", res.Pass, r.Pass)
	}
	same("id", res.ID, r.RunID)
	same("sandbox_id", res.SandboxID, r.SandboxID)
	same("snapshot", res.Snapshot, r.Snapshot)
	same("image", res.Image, r.Image)
	same("engine", res.Engine, r.Engine)
	same("isolation", res.Isolation, r.Isolation)
	same("seccomp_profile_sha256", res.Seccomp, r.SeccompSHA256)
	same("reason", res.Reason, r.Reason)
	if res.ExitCode == nil {
		differ("exit_code", nil, r.ExitCode)
	} else {
		same("exit_code", *res.ExitCode, r.ExitCode)
	}
	if !res.StartedAt.Equal(r.StartedAt) {
		differ("started_at", res.StartedAt, r.StartedAt)
	}
	if !res.FinishedAt.Equal(r.FinishedAt) {
		differ("finished_at", res.FinishedAt, r.FinishedAt)
	}
	same("duration_ms", res.DurationMS, r.FinishedAt.Sub(r.StartedAt).Milliseconds())
	if res.Error != "" || res.ErrorKind != "" {
		differ("error", res.Error, "")
	}
	errs = append(errs, diffJSON("limits", res.Limits, r.Policy.Limits)...)
	errs = append(errs, diffJSON("policy", res.Policy, r.Policy)...)
	errs = append(errs, checkStream("stdout", res.Stdout, r.Stdout)...)
	errs = append(errs, checkStream("stderr", res.Stderr, r.Stderr)...)
	if len(res.Artifacts) != len(r.Artifacts) {
		differ("artifacts", fmt.Sprintf("%d files", len(res.Artifacts)), fmt.Sprintf("%d", len(r.Artifacts)))
	}
	for i := range min(len(res.Artifacts), len(r.Artifacts)) {
		a, w := res.Artifacts[i], r.Artifacts[i]
		f := "artifacts[" + strconv.Itoa(i) + "]."
		same(f+"path", a.Path, w.Path)
		same(f+"size", a.Size, w.Size)
		same(f+"sha256", a.SHA256, w.SHA256)
		same(f+"mime", a.MIME, w.MIME)
	}
	if len(res.Rejected) != len(r.Rejected) {
		differ("rejected", fmt.Sprintf("%d files", len(res.Rejected)), fmt.Sprintf("%d", len(r.Rejected)))
	}
	for i := range min(len(res.Rejected), len(r.Rejected)) {
		a, w := res.Rejected[i], r.Rejected[i]
		f := "rejected[" + strconv.Itoa(i) + "]."
		same(f+"path", a.Path, w.Path)
		same(f+"reason", a.Reason, w.Reason)
		same(f+"detail", a.Detail, w.Detail)
	}
	return errors.Join(errs...)
}

// checkStream checks a Result's stream against the receipt's: the totals,
// and the bytes it carries (head and tail) by their hashes.
func checkStream(name string, got streamJSON, want Stream) []error {
	var errs []error
	differ := func(field string, result, receipt any) {
		errs = append(errs, mismatch(name+"."+field, result, receipt))
	}
	if got.Bytes != want.Bytes {
		differ("bytes", got.Bytes, want.Bytes)
	}
	if got.Truncated != want.Truncated {
		differ("truncated", got.Truncated, want.Truncated)
	}
	if got.SHA256 != want.SHA256 {
		differ("sha256", got.SHA256, want.SHA256)
	}
	head, err := carried(got.Text, got.Base64, want.Truncated, false)
	if err != nil {
		errs = append(errs, &Mismatch{Field: name + ".text", Detail: err.Error()})
	} else if sum := sha256Hex(head); sum != want.CapturedSHA256 {
		differ("text", fmt.Sprintf("%d bytes hashing to %s", len(head), sum), fmt.Sprintf("%d bytes hashing to %s", want.CapturedBytes, want.CapturedSHA256))
	}
	tail, err := carried(got.Tail, got.TailBase64, false, true)
	if err != nil {
		errs = append(errs, &Mismatch{Field: name + ".tail", Detail: err.Error()})
	} else if sum := sha256Hex(tail); sum != want.TailSHA256 {
		differ("tail", fmt.Sprintf("%d bytes hashing to %s", len(tail), sum), fmt.Sprintf("%d bytes hashing to %s", want.TailBytes, want.TailSHA256))
	}
	if want.Truncated {
		omitted := want.Bytes - want.CapturedBytes - want.TailBytes
		if got.OmittedBytes == nil || *got.OmittedBytes != omitted {
			differ("omitted_bytes", got.OmittedBytes, omitted)
		}
	} else if got.OmittedBytes != nil {
		differ("omitted_bytes", *got.OmittedBytes, nil)
	}
	return errs
}

// carried returns the bytes a stream field pair carries: base64 when
// given, else text. Beside base64, text must be what the runner writes
// there: the bytes themselves when they are UTF-8 (and then there is no
// base64), else the bytes less a character split at the cut, or nothing.
func carried(text, b64 *string, cutEnd, cutStart bool) ([]byte, error) {
	if b64 == nil {
		if text == nil {
			return nil, nil
		}
		return []byte(*text), nil
	}
	b, err := base64.StdEncoding.Strict().DecodeString(*b64)
	if err != nil {
		return nil, fmt.Errorf("base64: %w", err)
	}
	if utf8.Valid(b) {
		return nil, fmt.Errorf("base64 carries UTF-8, which the runner writes as text")
	}
	want := b
	if cutEnd {
		want = dropSplitEnd(want)
	}
	if cutStart {
		want = dropSplitStart(want)
	}
	if len(want) == len(b) || !utf8.Valid(want) {
		if text != nil {
			return nil, fmt.Errorf("text %s beside base64 that holds no whole UTF-8 text", val(*text))
		}
	} else if text == nil || *text != string(want) {
		return nil, fmt.Errorf("text %s differs from its base64's text %s", val(text), val(string(want)))
	}
	return b, nil
}

// dropSplitEnd drops an incomplete UTF-8 sequence at the end of b.
func dropSplitEnd(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-3; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}

// dropSplitStart drops continuation bytes, up to three, at the start of b.
func dropSplitStart(b []byte) []byte {
	i := 0
	for i < 3 && i < len(b) && !utf8.RuneStart(b[i]) {
		i++
	}
	return b[i:]
}

// diffJSON compares a Result's field, as JSON, with the receipt's value,
// naming each differing key.
func diffJSON(field string, got json.RawMessage, want any) []error {
	var a, b any
	if len(got) > 0 {
		if err := json.Unmarshal(got, &a); err != nil {
			return []error{&Mismatch{Field: field, Detail: err.Error()}}
		}
	}
	raw, err := json.Marshal(want)
	if err == nil {
		err = json.Unmarshal(raw, &b)
	}
	if err != nil {
		return []error{&Mismatch{Field: field, Detail: err.Error()}}
	}
	var errs []error
	walkDiff(field, a, b, func(path string, x, y any) {
		errs = append(errs, mismatch(path, x, y))
	})
	return errs
}

func walkDiff(path string, a, b any, report func(path string, a, b any)) {
	switch bv := b.(type) {
	case map[string]any:
		av, ok := a.(map[string]any)
		if !ok {
			report(path, a, "an object")
			return
		}
		keys := make([]string, 0, len(av)+len(bv))
		for k := range av {
			keys = append(keys, k)
		}
		for k := range bv {
			if _, dup := av[k]; !dup {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			walkDiff(path+"."+k, av[k], bv[k], report)
		}
	case []any:
		av, ok := a.([]any)
		if !ok || len(av) != len(bv) {
			report(path, a, b)
			return
		}
		for i := range bv {
			walkDiff(path+"["+strconv.Itoa(i)+"]", av[i], bv[i], report)
		}
	default:
		if a != b {
			report(path, a, b)
		}
	}
}

func equalPtr[T comparable](a, b *T) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// val shows a value in a message: strings quoted (and cut), nil as null.
func val(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		if len(v) > 80 {
			v = v[:80] + "…"
		}
		return strconv.Quote(v)
	case *string:
		if v == nil {
			return "null"
		}
		return val(*v)
	case *bool:
		if v == nil {
			return "null"
		}
		return strconv.FormatBool(*v)
	case *int64:
		if v == nil {
			return "null"
		}
		return strconv.FormatInt(*v, 10)
	case time.Time:
		return v.UTC().Format(time.RFC3339Nano)
	case []any, map[string]any:
		b, _ := json.Marshal(v)
		return val(string(b))
	}
	return fmt.Sprint(v)
}
