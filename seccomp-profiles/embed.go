// Package seccompprofiles embeds airlock's seccomp profiles. Package seccomp
// loads them by name: "default" is default.json.
package seccompprofiles

import "embed"

// FS holds every profile as <name>.json.
//
//go:embed *.json
var FS embed.FS
