package e2b

// processRoutes registers envd's process.Process service (e2b-protocol.md §4, §7).
func (s *Server) processRoutes() {}
