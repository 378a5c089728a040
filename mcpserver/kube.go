package mcpserver

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sandboxCreateKube is sandbox_create with engine kube: a claim on the
// warm pool of its template, which is the policy, so nothing else may be
// asked.
func (s *Server) sandboxCreateKube(ctx context.Context, in SandboxCreateArgs) (*mcp.CallToolResult, SandboxResult, error) {
	if in.Image != "" || in.Memory != "" || in.TimeoutS != nil || in.TTLS != nil || in.IdleTimeoutS != nil || len(in.AllowHost) > 0 || len(in.Credential) > 0 || in.EgressLimit != "" {
		return nil, SandboxResult{}, toolError("creating the sandbox", invalidArgs{fmt.Errorf("engine kube takes template alone: the cluster's SandboxTemplate is the policy (render one with the policy wanted: airlock kube render)")})
	}
	si, err := s.svc.CreateKubeFor(context.WithoutCancel(ctx), in.Template, nil, 0)
	if err != nil {
		return nil, SandboxResult{}, toolError("creating the sandbox", err)
	}
	s.log.Info("sandbox created on Kubernetes over MCP", "sandbox_id", si.ID)
	return nil, sandboxResult(si, time.Now()), nil
}
