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
//   - A stream is bound twice: sha256 over every byte the program wrote
//     (kept or not), and captured_sha256 and tail_sha256 over the head and
//     tail bytes a Result carries (its text or base64, tail or
//     tail_base64). CheckResult recomputes the latter from the Result.
//   - CheckResult holds a Result (or batch result line) to the receipt it
//     carries, field by field, and names every field that disagrees.
//     image_ref, usage, pool, egress, artifacts_dir, quarantine_dir and a
//     rejection's quarantined name are not bound.
//   - Keys are read as written (exactKeys): in a receipt, a Result, and
//     every line of a results file, a line without a receipt included.
//   - The policy hash is Hash(Policy), an isolation.Record: JSON-tagged,
//     with no host path.
//   - A receipt an airlock node signs for a one-shot pod names the pod's
//     UID (pod_uid), so it holds for that pod alone. Fields added to
//     version 2 since it began are omitted when empty: a receipt without
//     them signs the same bytes it always did.
//   - Version 1 receipts still verify, alone: they bind no Result, no
//     captured bytes, no job id and no verdict. A results line around one
//     is LineLegacy, never LineVerified.
package receipt
