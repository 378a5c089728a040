package egress

import "github.com/airlock-sandbox/airlock/internal/fielderr"

// Error refuses one entry of a field, such as one --allow-host. It is
// errdefs.IsInvalidArgument, and the same type as wire.Error.
type Error = fielderr.Error

func refuse(field, s, want string) *Error { return fielderr.Refuse(field, s, want) }
