package receipt

import (
	"fmt"

	"github.com/airlock-sandbox/airlock/wire"
)

// exactKeys refuses JSON that encoding/json would read otherwise than a
// reader that takes keys as written (jq, Python): two keys of one object
// that are the same but for case (the decoder keeps the last), and a key
// that names a field of v in another case (wire.CheckKeysFolded). Either
// would let a receipt or a Result show one value to other tools and
// another to the verifier.
func exactKeys(b []byte, v any) error {
	if err := wire.CheckKeysFolded(b, v); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}
