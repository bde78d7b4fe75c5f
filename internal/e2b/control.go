package e2b

// controlRoutes registers the control plane: sandboxes, timeouts, pause, kill (e2b-protocol.md §2).
func (s *Server) controlRoutes() {}
