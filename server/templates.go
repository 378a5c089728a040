package server

import "github.com/airlock-sandbox/airlock/templates"

// templateStore is the templates under the server's root, which run and
// sandbox requests name in "template".
func (s *Server) templateStore() *templates.Store { return templates.Open(s.svc.Root()) }
