package main

import (
	"encoding/json"
	"io"

	"github.com/airlock-sandbox/airlock/internal/termsafe"
)

// writeJSON writes v as one line of JSON. The program's output can sit in
// it, so C1 controls are escaped too (termsafe.JSON): --json output is
// safe to look at in a terminal.
func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(termsafe.JSON(b), '\n'))
	return err
}
