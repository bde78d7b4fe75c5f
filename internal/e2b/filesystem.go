package e2b

// filesystemRoutes registers envd's filesystem.Filesystem service (e2b-protocol.md §5).
func (s *Server) filesystemRoutes() {}
