package api

import (
	"context"
	"time"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/wire"
)

// The contracts below are what the handlers need from the rest of the
// daemon, each a named interface in an Options field of its own. The daemon
// wires sandbox.Manager into every one of them and checks at compile time
// that it implements them, so a renamed method is a build error rather than
// a feature that quietly switches off. A nil field turns its routes off
// with a 501 (Activity: API calls are not counted); only tests leave them
// nil.

// Manager is what the core sandbox routes need from the sandbox manager.
type Manager interface {
	Create(ctx context.Context, req wire.CreateSandboxRequest, co sandbox.CreateOptions) (wire.Sandbox, error)
	Get(ctx context.Context, id string) (wire.Sandbox, error)
	List(ctx context.Context, f sandbox.ListFilter) ([]wire.Sandbox, error)
	Destroy(ctx context.Context, id string) error
	Start(ctx context.Context, id string) (wire.Sandbox, error)
	Stop(ctx context.Context, id string) (wire.Sandbox, error)
	Agent(ctx context.Context, id string) (*agentconn.Conn, error)
}

// runtimeResolver is implemented by a Manager that chooses a create's
// isolation runtime: the one asked for, else the daemon's default, checked
// against what the engine can run.
type runtimeResolver interface {
	ResolveRuntime(ctx context.Context, rt string) (string, error)
}

// Lifecycle is what pause, resume, timeouts and the event log need.
type Lifecycle interface {
	Pause(ctx context.Context, id string) (wire.Sandbox, error)
	Resume(ctx context.Context, id string) (wire.Sandbox, error)
	SetTimeouts(ctx context.Context, id string, req wire.SetTimeoutsRequest) (wire.Sandbox, error)
	Events(ctx context.Context, id string, after int64, limit int) ([]wire.SandboxEvent, error)
	// SubscribeEvents returns a channel that receives a value whenever
	// events were logged, and a function to unsubscribe.
	SubscribeEvents() (<-chan struct{}, func())
	// Closing is closed when the daemon shuts down: event streams end then.
	Closing() <-chan struct{}
}

// Activity keeps idle timeouts honest (docs/lifecycle.md, "What counts as
// activity"): without it the reaper would stop sandboxes that are in use.
type Activity interface {
	// Touch records an API call for sandbox id.
	Touch(id string)
	// Begin marks a long call (exec, transfer, terminal, tunnel, preview)
	// as running until end is called.
	Begin(id string) (end func())
}

// Egress is what the egress routes need: a sandbox's policy and status.
type Egress interface {
	SetEgress(ctx context.Context, id string, p wire.EgressPolicy) (wire.Sandbox, error)
	EgressStatus(ctx context.Context, id string) (wire.EgressStatus, error)
}

// Ports records which ports' previews are public.
type Ports interface {
	SetPortPublic(ctx context.Context, id string, port int, public bool) (wire.Sandbox, error)
}

// Stats samples a sandbox: driver counters and, when it runs, the
// workspace's disk usage (a walk at most diskMaxAge old).
type Stats interface {
	Stats(ctx context.Context, id string, diskMaxAge time.Duration) (wire.SandboxStats, error)
}

// GatewayAccess changes one sandbox's access to the LLM gateway.
type GatewayAccess interface {
	// RotateGateway replaces the sandbox's token for provider and, when it
	// runs, writes the new one into it.
	RotateGateway(ctx context.Context, id, provider string) (wire.GatewayCredential, error)
	RevokeGateway(ctx context.Context, id, provider string) (wire.Sandbox, error)
}

// Pools keeps the templates' warm pools (sandbox.Manager's pool.go).
type Pools interface {
	SetPool(ctx context.Context, name string, cfg wire.PoolConfig) (wire.PoolStatus, error)
	DeletePool(ctx context.Context, name string) error
	PoolStatus(name string) (wire.PoolStatus, bool)
}
