package agent

// The spawner: a second mode of the agent's program, for processes that
// must outlive a checkpoint. gVisor's restore kills every process that an
// exec started (the sentry marks an exec's process, and everything it
// forks, as an exec session's), so a program started in the background
// survives a pause only when it descends from the container's own init.
// The sandbox's idle init therefore starts `/.airlock-agent spawner` as its
// child when the sandbox boots; a detached exec is then a short-lived
// `/.airlock-agent spawn -- ARGV…`, which hands its argv, environment and
// working directory to the spawner over SpawnerSocket, an abstract unix
// socket of the sandbox's own network namespace, and exits once the
// spawner has forked the program.
//
// The spawner holds nothing an exec does not: it runs as the init does
// (the policy's user, no capabilities, no-new-privileges, the container's
// seccomp filter and rlimits), and so does every program it forks. A
// process of the sandbox that connects to it gains only a way to start a
// process it could have started itself.

// Path is where a gVisor sandbox of the oci engine has the agent's
// program, bound read-only in its root.
const Path = "/.airlock-agent"

// SpawnerSocket is the spawner's abstract socket name (Go's "@" prefix).
const SpawnerSocket = "@airlock-spawner"

// SpawnRequest is what the spawn client sends: one JSON object, then it
// half-closes its end.
type SpawnRequest struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
}

// SpawnReply is the spawner's answer: the program's pid, or why it did not
// start (an errno, 0 with Pid set).
type SpawnReply struct {
	Pid   int    `json:"pid,omitempty"`
	Errno int    `json:"errno,omitempty"`
	Error string `json:"error,omitempty"`
}

// Spawned starts what `airlock-agent spawn` prints on stdout once the
// program runs, then its pid: the host takes the start as done only with
// it, so an agent that knows no spawn (exiting 0 at its stdin's end) is
// never taken for one that started the program.
const Spawned = "airlock-spawned/1 "

// Exit codes of `airlock-agent spawn`: 0 once the program runs (and
// Spawned was printed); the shell's 127 (not found) and 126 (found, not
// started); SpawnUnreachable when no spawner took the request, and the
// host starts the program another way; SpawnUnanswered when the spawner
// was handed the request but its answer never came (it died, or its
// reply could not be passed on): the program may be running, and the
// host must not start it again.
const (
	SpawnUnreachable = 125
	SpawnUnanswered  = 124
)

// MaxSpawnRequest bounds a request the spawner reads.
const MaxSpawnRequest = MaxSpawn
