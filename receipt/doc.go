// Package receipt makes signed, verifiable evidence of one sandbox run: what
// ran, where, under which policy, on what inputs, and what came out.
//
// Rules:
//   - The bytes signed are Canonical(Receipt): the receipt's JSON with object
//     keys sorted at every level, no insignificant whitespace, numbers as
//     encoding/json wrote them and no HTML escaping. Any change to a field,
//     or to this encoding, changes those bytes.
//   - Signatures are ed25519. The signing key lives in <dir>/receipt.key
//     (PEM, PKCS#8, mode 0600) and is created once, atomically: the file
//     appears under its final name only when complete, and concurrent
//     creators all end up with the same key.
//   - A key file or key directory that others can read or replace is
//     refused, never repaired.
//   - Sign refuses a receipt that Verify would reject.
//   - Verify without a trusted key proves only that the embedded key signed
//     the receipt; pin the key to prove who issued it.
//   - Read refuses unknown fields, so nothing unsigned rides along.
package receipt
