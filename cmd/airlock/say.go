package main

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/term"

	"github.com/airlock-sandbox/airlock/internal/termsafe"
)

// sayf writes one line of airlock's own to w (stderr): "airlock: " and
// format's text. An error or a progress line carries text from elsewhere
// (an API server's or a node's messages and ids, a sandbox's stderr), so
// its control characters are escaped (package termsafe): on a terminal as
// the locale asks, as for a program's output (liveWriter); elsewhere (a
// log a person reads later) by the UTF-8 rules. Unlike a program's
// output, such a line is never data to pass on exactly.
func sayf(w io.Writer, format string, args ...any) {
	tw := termsafe.New(w)
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		tw = termsafe.ForLocale(w, os.Getenv)
	}
	fmt.Fprintf(tw, "airlock: "+format+"\n", args...)
	tw.Flush()
}
