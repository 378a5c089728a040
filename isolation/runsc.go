package isolation

import "strings"

// RunscFlags are the runsc flags airlock's policy depends on, in the order
// they are passed: no network at all, and the spec's seccomp profile
// applied (runsc ignores it without --oci-seccomp). Every runsc command
// line and runtime registration starts with them, and receipts record them.
func RunscFlags() []string { return []string{"--network=none", "--oci-seccomp"} }

// RunscNetwork is flags (RunscFlags, and others) for a policy's egress e:
// when on, --network=sandbox in place of --network=none, so that runsc's
// own network stack takes the interfaces of the namespace the spec joins
// (OCINetwork), where the egress proxy is the one peer. Without egress,
// flags are returned as they are.
func RunscNetwork(flags []string, e Egress) []string {
	if !e.On() {
		return flags
	}
	out := make([]string, len(flags))
	for i, f := range flags {
		if f == "--network=none" {
			f = "--network=sandbox"
		}
		out[i] = f
	}
	return out
}

// MissingRunscFlags lists the RunscFlags that args (a registered runtime's
// arguments) lack or override. As in runsc's own parsing, the last
// occurrence of a flag wins, and a bare boolean flag means true.
func MissingRunscFlags(args []string) []string {
	last := map[string]string{}
	for _, a := range args {
		name, val := flagOf(a)
		last[name] = val
	}
	var missing []string
	for _, f := range RunscFlags() {
		name, val := flagOf(f)
		if last[name] != val {
			missing = append(missing, f)
		}
	}
	return missing
}

func flagOf(a string) (name, val string) {
	name, val, ok := strings.Cut(strings.TrimLeft(a, "-"), "=")
	if !ok {
		val = "true"
	}
	return name, val
}
