package sandbox

import (
	"context"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/wire"
)

// CreateHook takes part in creating a sandbox; the backup service uses it
// to create sandboxes from a backup or a snapshot.
type CreateHook interface {
	// PrepareCreate may rewrite the request (a snapshot becomes an image
	// and a backup) and refuse it before anything is made.
	PrepareCreate(ctx context.Context, req *wire.CreateSandboxRequest) error
	// AfterReady runs once the agent is up, before the repo and setup.
	AfterReady(ctx context.Context, id string, conn *agentconn.Conn, req wire.CreateSandboxRequest) error
}
