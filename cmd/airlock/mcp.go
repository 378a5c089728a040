package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/admission"
	"github.com/airlock-sandbox/airlock/mcpserver"
	"github.com/airlock-sandbox/airlock/server"
	"github.com/airlock-sandbox/airlock/service"
)

func newMCPCmd(g *globals) *cobra.Command {
	var engineName string
	var maxSandboxes, maxExecs int
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve airlock's sandboxes as MCP tools over stdio",
		Long: fmt.Sprintf(`Serve the Model Context Protocol over stdin and stdout, for an MCP client
(Claude Desktop, an IDE, an agent runtime) that starts airlock itself. The
tools: run_code (one snippet in a fresh sandbox), sandbox_create,
sandbox_exec, sandbox_write_file, sandbox_read_file, sandbox_list,
sandbox_pause, sandbox_resume and sandbox_destroy. Each does what airlock
run, sandbox create, exec, cp, sandbox ls, pause, resume and rm do, with the same isolation and limits, and a
sandbox made here ends after its idle timeout or TTL like any other, even
when the client is gone.

--max-sandboxes caps the sandboxes live under the root plus the runs in
progress (those of other airlock commands count too): past it run_code and
sandbox_create are refused as over_limit, and the client is told to
destroy a sandbox first. --max-execs caps the sandbox_exec calls in
progress at once (and %d in one sandbox), as airlock serve's does.

stdout carries the protocol only; --debug logs go to stderr. airlock serve
offers the same tools over streamable HTTP at /mcp.`, service.DefaultMaxExecsPerSandbox),
		Example: `  airlock mcp
  airlock mcp --root /var/lib/airlock --engine oci --max-sandboxes 8`,
		Args: exactArgs(0, "mcp takes no arguments; an MCP client starts it and talks over stdin and stdout"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			svc, err := mcpService(g, engineName, maxSandboxes, maxExecs)
			if err != nil {
				return err
			}
			s := mcpserver.New(svc, mcpserver.WithLogger(g.logger()), mcpserver.WithVersion(version))
			return s.ServeStdio(cmd.Context())
		},
	}
	cmd.Flags().IntVar(&maxSandboxes, "max-sandboxes", server.DefaultMaxSandboxes, "cap on live sandboxes plus one-shot runs in progress (over_limit past it)")
	cmd.Flags().IntVar(&maxExecs, "max-execs", service.DefaultMaxExecs, "cap on the sandbox_exec calls in progress at once (over_limit past it)")
	cmd.Flags().StringVar(&engineName, "engine", "auto", "engine of run_code and new sandboxes: oci, docker, or auto (oci where root and setup's runsc are available, else docker)")
	return cmd
}

// mcpService is the service airlock mcp serves, held to its caps.
func mcpService(g *globals, engineName string, maxSandboxes, maxExecs int) (*service.Service, error) {
	if maxSandboxes < 1 {
		return nil, usageError{fmt.Errorf("--max-sandboxes %d: give a positive number", maxSandboxes)}
	}
	if maxExecs < 1 {
		return nil, usageError{fmt.Errorf("--max-execs %d: give a positive number", maxExecs)}
	}
	return service.New(g.root, g.host(), service.WithEngine(engineName), service.WithAdmission(admission.New(g.root, maxSandboxes)),
		service.WithExecLimits(maxExecs, service.DefaultMaxExecsPerSandbox)), nil
}
