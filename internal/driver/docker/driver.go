// Package docker is hotcell's Docker Engine driver. It owns the containers and
// named volumes that make up a sandbox box on the engine, and nothing inside
// them: everything that happens in a box is the agent's job.
//
// Every object it creates carries driver.LabelManaged and driver.LabelID so
// that a reconciler can find what hotcell owns after a daemon restart.
package docker

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/moby/moby/client"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
)

var (
	_ driver.Driver = (*Driver)(nil)
	_ driver.Pauser = (*Driver)(nil)
)

// Name is the driver's name in driver.Info.
const Name = "docker"

// Driver drives a Docker Engine. It is safe for concurrent use.
type Driver struct {
	c *client.Client
	// disks, when set, hold the workspaces of sandboxes with a disk limit.
	disks WorkspaceDisks
	// build bounds template builds (UseBuildLimits).
	build BuildLimits
	// engineRuntimes maps hotcell runtimes to the engine's (runtime.go);
	// nil is DefaultEngineRuntimes.
	engineRuntimes map[string]string

	netsMu sync.Mutex
	nets   map[string]*boxNet // by network name (veth.go)
}

// New connects to the engine named by the environment (DOCKER_HOST and
// friends, default the local unix socket). The API version is negotiated on
// the first request, so engines down to API 1.40 (Docker 19.03) work. opts
// are applied after client.FromEnv and can override it.
func New(opts ...client.Opt) (*Driver, error) {
	c, err := client.New(append([]client.Opt{client.FromEnv}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	return &Driver{c: c}, nil
}

// NewWithClient returns a driver that uses c. The caller keeps owning c.
func NewWithClient(c *client.Client) *Driver { return &Driver{c: c} }

// Client returns the engine client, for tests and tools that need to look
// at what the driver made.
func (d *Driver) Client() *client.Client { return d.c }

// Close releases the client's connections.
func (d *Driver) Close() error { return d.c.Close() }

// Info describes the engine.
func (d *Driver) Info(ctx context.Context) (driver.Info, error) {
	res, err := d.c.Info(ctx, client.InfoOptions{})
	if err != nil {
		return driver.Info{}, classify("docker info", err)
	}
	engine := map[string]bool{}
	for name := range res.Info.Runtimes {
		engine[name] = true
	}
	have, hints := d.available(engine)
	return driver.Info{
		Name:          Name,
		EngineVersion: res.Info.ServerVersion,
		CPUs:          res.Info.NCPU,
		MemoryBytes:   res.Info.MemTotal,
		Runtimes:      have,
		RuntimeHints:  hints,
	}, nil
}

// validID accepts ids that are safe as part of a container name, a volume
// name and a hostname. The manager generates ids; this guards the engine
// against anything else reaching it.
var validID = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)

func checkID(id string) error {
	if !validID.MatchString(id) {
		return errdefs.Invalid("id", "sandbox id %q must be 1-63 characters of [a-zA-Z0-9_.-] starting with a letter or digit", id)
	}
	return nil
}

// ContainerName is the engine name of sandbox id's container.
func ContainerName(id string) string { return "hotcell-" + id }

// VolumeName is the engine name of sandbox id's workspace volume.
func VolumeName(id string) string { return "hotcell-" + id + "-workspace" }

// hostname derives a valid RFC 1123 label from the id, so tools inside the
// box that print the hostname show which sandbox they are in.
func hostname(id string) string {
	h := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		}
		return '-'
	}, id)
	if len(h) > 63 {
		h = h[:63]
	}
	return strings.Trim(h, "-")
}

// managedLabels are the labels every object of sandbox id carries.
func managedLabels(id string) map[string]string {
	return map[string]string{driver.LabelManaged: "true", driver.LabelID: id}
}
