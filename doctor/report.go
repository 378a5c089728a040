package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
)

// Report is the JSON form of a run of the checks.
type Report struct {
	Checks []Check `json:"checks"`
	OK     bool    `json:"ok"`
}

// WriteJSON writes the checks as one Report object.
func WriteJSON(w io.Writer, checks []Check) error {
	if checks == nil {
		checks = []Check{}
	}
	return json.NewEncoder(w).Encode(Report{Checks: checks, OK: OK(checks)})
}

// WriteText writes the checks as a table, a fix line under each row that
// has one, and a summary.
func WriteText(w io.Writer, checks []Check) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tSTATUS\tDETAIL")
	warns := 0
	for _, c := range checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, c.Status, c.Detail)
		if c.Fix != "" && c.Status != StatusOK {
			fmt.Fprintf(tw, "\t\tfix: %s\n", c.Fix)
		}
		if c.Status == StatusWarn {
			warns++
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var err error
	switch n := failures(checks); {
	case n > 0:
		_, err = fmt.Fprintf(w, "\n%s failed: airlock cannot keep its guarantees on this host as configured\n", count(n, "check"))
	case warns > 0:
		_, err = fmt.Fprintf(w, "\nno check failed (%s)\n", count(warns, "warning"))
	default:
		_, err = fmt.Fprintln(w, "\nevery check passed")
	}
	return err
}

func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
