package egress

import (
	"fmt"
	"strconv"
	"strings"
)

// Error refuses one entry of a field, such as one --allow-host. It is
// errdefs.IsInvalidArgument.
type Error struct {
	// Field is the field's wire name: "allow_host" or "credential".
	Field string
	// Value is the entry given, quoted.
	Value string
	// Want says what to give instead.
	Want string
}

func (e *Error) Error() string { return e.named(e.Field) }

// InvalidParameter classifies the error for errdefs.
func (*Error) InvalidParameter() {}

// AsFlag is the error with the field named as the CLI's flag,
// "--allow-host" for "allow_host".
func (e *Error) AsFlag() string { return e.named("--" + strings.ReplaceAll(e.Field, "_", "-")) }

func (e *Error) named(name string) string { return fmt.Sprintf("%s %s: %s", name, e.Value, e.Want) }

func refuse(field, s, want string) *Error { return &Error{field, strconv.Quote(s), want} }
