package daemon

import (
	"github.com/hotcell/hotcell/internal/api"
	"github.com/hotcell/hotcell/internal/backup"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/driver/docker"
	"github.com/hotcell/hotcell/internal/driver/kubernetes"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/store"
)

// The sandbox manager serves every part of the API's contract; these make a
// renamed or changed method a build error instead of a feature that
// quietly switches off (a lost Touch would let the idle reaper stop
// sandboxes in use).
var (
	_ api.Manager       = (*sandbox.Manager)(nil)
	_ api.Lifecycle     = (*sandbox.Manager)(nil)
	_ api.Activity      = (*sandbox.Manager)(nil)
	_ api.Egress        = (*sandbox.Manager)(nil)
	_ api.Ports         = (*sandbox.Manager)(nil)
	_ api.Stats         = (*sandbox.Manager)(nil)
	_ api.GatewayAccess = (*sandbox.Manager)(nil)
	_ api.Pools         = (*sandbox.Manager)(nil)
	_ sandbox.PoolStore = (*store.Store)(nil)
	_ sandbox.Store     = (*store.Store)(nil)
	_ backup.Sandboxes  = (*sandbox.Manager)(nil)
	_ api.Backups       = (*backup.Service)(nil)
)

// The sandbox manager finds the driver's optional features by type
// assertion (a backend may lack them); the Docker driver must have every
// one, or pause, orphan removal, live events, the engine-restart probe,
// snapshots, egress or stats would switch off without a word.
var (
	_ driver.Pauser         = (*docker.Driver)(nil)
	_ driver.InstanceLister = (*docker.Driver)(nil)
	_ driver.EventWatcher   = (*docker.Driver)(nil)
	_ driver.Prober         = (*docker.Driver)(nil)
	_ driver.Snapshotter    = (*docker.Driver)(nil)
	_ driver.Networker      = (*docker.Driver)(nil)
	_ driver.Statter        = (*docker.Driver)(nil)
)

// The Kubernetes driver must have what a daemon on it relies on: orphan
// removal, live events, the probe and stats. It lacks pause, snapshots,
// image builds and egress networks; the daemon refuses those (backend.go).
var (
	_ driver.InstanceLister = (*kubernetes.Driver)(nil)
	_ driver.EventWatcher   = (*kubernetes.Driver)(nil)
	_ driver.Prober         = (*kubernetes.Driver)(nil)
	_ driver.Statter        = (*kubernetes.Driver)(nil)
)

// withManager sets every field of o that the sandbox manager serves.
func withManager(o api.Options, mgr *sandbox.Manager) api.Options {
	o.Manager = mgr
	o.Lifecycle = mgr
	o.Activity = mgr
	o.Egress = mgr
	o.Ports = mgr
	o.Stats = mgr
	o.GatewayAccess = mgr
	o.Pools = mgr
	return o
}
