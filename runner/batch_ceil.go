package runner

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/isolation"
)

// BatchCeilings are the most a batch's job lines may ask for: a line
// (a hostile file, often an agent's) may narrow the batch's settings,
// never widen them. The CLI makes them from `airlock batch`'s command
// line. A job over one is invalid input, whose error names the field,
// the value asked, the ceiling and the flag that sets it; the batch goes
// on.
type BatchCeilings struct {
	// Limits bound a job's limits field by field, whatever gave them (its
	// line or its template); a zero field bounds nothing (the CLI: a flag
	// not given). OpenFiles is not bounded.
	Limits isolation.Limits
	// Egress is all the egress a job may have, from its line or its
	// template: every host and port it may reach must be on Egress.Allow,
	// and every credential it uses in Egress.Credentials. Empty, a job
	// has no network at all. Egress.Bytes bounds its egress limit (zero:
	// no bound).
	Egress isolation.Egress
	// AllowFrom and CredentialFrom say, in a refusal, where Egress.Allow
	// and Egress.Credentials came from ("--allow-host", `--template "py"`);
	// empty means from nowhere: the batch gave none.
	AllowFrom, CredentialFrom string
	// Template, when set, is the one template a job may name: a job that
	// names another is refused (it would take that template's settings
	// where the batch gave no flag).
	Template string
	// Isolation is the batch's own mode, its jobs' unless a line narrows
	// it: under gvisor, a job that would run under runc (a template of
	// --isolation seccomp named by its line) is refused. Empty bounds
	// nothing.
	Isolation isolation.Mode
}

// jobFlags name the flag of `airlock batch` that sets each ceiling.
var jobFlags = map[string]string{
	"timeout": "--timeout", "memory": "--memory", "cpus": "--cpus", "pids": "--pids",
	"output limit": "--output-limit", "tmp size": "--tmp-size", "file size": "--file-size",
	"egress limit": "--egress-limit",
}

// checkTemplate refuses a job that names a template other than the one
// the batch allows.
func (c *BatchCeilings) checkTemplate(j Job) error {
	if c == nil || c.Template == "" || j.Template == "" || j.Template == c.Template {
		return nil
	}
	return fmt.Errorf("template %q: this batch runs on --template %s, and a job line may not name another (it would take that template's settings); leave \"template\" out of the line to run on %s, or run the batch without --template",
		j.Template, c.Template, c.Template)
}

// check refuses what job j's spec s asks for above the ceilings: every
// value over one, joined.
func (c *BatchCeilings) check(j Job, s Spec) error {
	if c == nil {
		return nil
	}
	var errs []error
	over := func(field string, v, max any, above bool) {
		if above {
			flag := jobFlags[field]
			errs = append(errs, fmt.Errorf("%s %v is above this batch's ceiling of %v (airlock batch %s): a job line may narrow the batch's flags, never widen them; ask for at most %v, or give the batch a higher %s",
				field, v, max, flag, max, flag))
		}
	}
	if c.Isolation == isolation.GVisor && s.Policy.Isolation != isolation.GVisor {
		errs = append(errs, fmt.Errorf("isolation %s%s is weaker than this batch's %s: a job line may narrow the batch's settings, never widen them (runc shares the host's kernel with the job); leave \"template\" out of the line, or run the batch with --isolation %s if that is meant",
			s.Policy.Isolation, templateOf(j.Template), c.Isolation, s.Policy.Isolation))
	}
	l, m := s.Policy.Limits, c.Limits
	over("timeout", l.Timeout, m.Timeout, m.Timeout > 0 && l.Timeout > m.Timeout)
	over("memory", l.Memory, m.Memory, m.Memory > 0 && l.Memory > m.Memory)
	over("cpus", l.CPUs, m.CPUs, m.CPUs > 0 && l.CPUs > m.CPUs)
	over("pids", l.Pids, m.Pids, m.Pids > 0 && l.Pids > m.Pids)
	over("output limit", l.Output, m.Output, m.Output > 0 && l.Output > m.Output)
	over("tmp size", l.Tmp, m.Tmp, m.Tmp > 0 && l.Tmp > m.Tmp)
	over("file size", l.FileSize, m.FileSize, m.FileSize > 0 && l.FileSize > m.FileSize)
	e := s.Policy.Egress
	over("egress limit", e.Bytes, c.Egress.Bytes, c.Egress.Bytes > 0 && e.Bytes > c.Egress.Bytes)

	// Whose egress it is: the line's own, or its template's.
	whose := func(lineGave bool) string {
		name := cmp.Or(j.Template, c.Template)
		if lineGave || name == "" {
			return ""
		}
		return fmt.Sprintf(" (template %q's)", name)
	}
	from := func(src, flag string, have []string) string {
		if src == "" {
			return "none: the batch gave no " + flag
		}
		if len(have) == 0 {
			return src + ": none"
		}
		return src + ": " + strings.Join(have, ", ")
	}
	for _, h := range e.Allow.Entries() {
		one, err := egress.ParseAllowlist([]string{h})
		if err == nil {
			_, err = c.Egress.Allow.Narrow(one)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("allow_host %q%s is not on this batch's allowlist (%s): a job line may narrow the batch's egress, never widen it; leave the host out, or give the batch --allow-host %s",
				h, whose(j.AllowHost != nil), from(c.AllowFrom, "--allow-host", c.Egress.Allow.Entries()), h))
		}
	}
	var have []string
	for _, cr := range c.Egress.Credentials {
		have = append(have, cr.String())
	}
	for _, cr := range e.Credentials {
		if !slices.Contains(c.Egress.Credentials, cr) {
			errs = append(errs, fmt.Errorf("credential %q%s is not one of this batch's credentials (%s): a job line may narrow the batch's egress, never widen it; leave it out, or give the batch --credential %s",
				cr.String(), whose(j.Credential != nil), from(c.CredentialFrom, "--credential", have), cr.String()))
		}
	}
	return errors.Join(errs...)
}

// templateOf names template name in a refusal, or nothing.
func templateOf(name string) string {
	if name == "" {
		return ""
	}
	return fmt.Sprintf(" (template %q's)", name)
}
