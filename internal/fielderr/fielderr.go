// Package fielderr is the refusal of one field of a request, shared by the
// packages that parse fields (wire, egress) without either importing the
// other. wire.Error and egress.Error are this type.
package fielderr

import (
	"fmt"
	"strconv"
	"strings"
)

// Error refuses one field, or one entry of a list field. It is
// errdefs.IsInvalidArgument.
type Error struct {
	// Field is the field's wire name, such as "memory" or "allow_host".
	Field string
	// Value is the value given, as JSON shows it: a string quoted, a
	// number bare.
	Value string
	// Want says what to give instead.
	Want string
}

func (e *Error) Error() string { return e.named(e.Field) }

// InvalidParameter classifies the error for errdefs.
func (*Error) InvalidParameter() {}

// AsFlag is the error with the field named as the CLI's flag, "--memory"
// for "memory".
func (e *Error) AsFlag() string { return e.named("--" + strings.ReplaceAll(e.Field, "_", "-")) }

func (e *Error) named(name string) string { return fmt.Sprintf("%s %s: %s", name, e.Value, e.Want) }

// Refuse refuses field's string value s.
func Refuse(field, s, want string) *Error { return &Error{field, strconv.Quote(s), want} }
