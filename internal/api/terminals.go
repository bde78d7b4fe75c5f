package api

// terminalRoutes registers the routes of this feature (not built yet).
func (s *Server) terminalRoutes() {}
