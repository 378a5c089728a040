// Package seccomp reads seccomp profiles in moby's JSON format, converts them
// to the runtime spec's LinuxSeccomp, and compiles them with libseccomp.
//
// Rules:
//   - Convert, validate, then execute. Parse converts and then compiles the
//     profile once, so a misspelt syscall, which runc would skip silently,
//     is refused before anything is created.
//   - Fail closed. Unknown fields, actions, operators and architectures are
//     errors, not ignored; so is a syscall name that no listed architecture
//     has. Without cgo and libseccomp, Parse, Load and Compile return
//     ErrNotSupported.
//   - An argument condition is refused where libseccomp would not compile it
//     as written: a SCMP_CMP_MASKED_EQ whose mask is 0 or whose valueTwo has
//     bits outside the mask, and, if the profile names a 32-bit
//     architecture (where only the low 32 bits are compared), any value
//     over 32 bits.
//   - A profile's groups are unambiguous: a syscall with an unconditional rule
//     appears in no other group, and a rule never compares one argument twice.
//   - A profile a user gives may only narrow the built-in default, never
//     allow what it denies (ParseCustom, Narrows): not by a weaker
//     defaultAction, another architecture, a call the default denies, or
//     argument conditions looser than the default's. Which denial answers
//     (ERRNO, KILL, TRAP) may differ. What cannot be proved narrower is
//     refused, naming the calls.
//   - The libseccomp code builds only under linux && cgo.
package seccomp
