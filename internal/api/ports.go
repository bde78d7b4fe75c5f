package api

// portRoutes registers the routes of this feature (not built yet).
func (s *Server) portRoutes() {}
