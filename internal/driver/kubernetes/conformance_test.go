package kubernetes_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/hotcell/hotcell/internal/agentauth"
	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/driver/drivertest"
	"github.com/hotcell/hotcell/internal/driver/kubernetes"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/images"
	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/testk8s"
	"github.com/hotcell/hotcell/internal/wire"
)

// clusterDriver returns a driver on a namespace of its own in the test
// cluster (scripts/k8s), with the agent image and the busybox test image
// imported into the cluster's containerd, and the busybox image's name.
func clusterDriver(t *testing.T) (*kubernetes.Driver, string) {
	t.Helper()
	d, image, _ := clusterDriverOn(t, true)
	return d, image
}

// clusterDriverOn is clusterDriver with the choice of the agent channel:
// the node's run dir (the daemon's unix socket) or only what a spec's
// AgentDial gives the box.
func clusterDriverOn(t *testing.T, nodeRunDirs bool, tweak ...func(*kubernetes.Config)) (*kubernetes.Driver, string, *testk8s.Env) {
	t.Helper()
	env := testk8s.Cluster(t)
	c := testenv.RequireDocker(t)
	agentBin := testenv.AgentBinary(t)
	// The image is built from this tree's agent once per test process: the
	// import below skips it when the cluster already has that very image.
	agentImage.once.Do(func() {
		agentImage.err = images.BuildAgent(context.Background(), c, images.AgentRef, agentBin)
	})
	if agentImage.err != nil {
		t.Fatal(agentImage.err)
	}
	env.ImportImage(t, images.AgentRef)
	image := testenv.BusyboxImage(t)
	env.ImportImage(t, image)
	ns := env.Namespace(t)
	cfg := kubernetes.Config{
		Kubeconfig: env.Kubeconfig,
		Namespace:  ns,
		// The test cluster has no provisioner and one node, this host.
		WorkspaceHostDir: t.TempDir(),
		PullPolicy:       corev1.PullNever,
		NodeRunDirs:      nodeRunDirs,
		// The images the driver makes go to the cluster's registry.
		Registry:       env.Registry,
		RegistryURL:    "http://" + env.Registry,
		RegistrySecret: env.RegistrySecret(t, ns),
	}
	for _, f := range tweak {
		f(&cfg)
	}
	d, err := kubernetes.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	testk8s.WaitImages(t, d, image, images.AgentRef)
	return d, image, env
}

// agentsOf makes d reach the agents the suite connects (a commit reads
// the box through its agent), and returns what the suite tells them to.
func agentsOf(d *kubernetes.Driver) func(string, *agentconn.Conn) {
	var mu sync.Mutex
	conns := map[string]*agentconn.Conn{}
	d.UseAgents(func(_ context.Context, id string) (*agentconn.Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		if c, ok := conns[id]; ok {
			return c, nil
		}
		return nil, fmt.Errorf("no agent of sandbox %s: %w", id, errdefs.ErrNotFound)
	})
	return func(id string, c *agentconn.Conn) {
		mu.Lock()
		conns[id] = c
		mu.Unlock()
	}
}

var agentImage struct {
	once sync.Once
	err  error
}

func randomID(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "test-" + hex.EncodeToString(b)
}

// tcpChannel is the daemon's side of the TCP agent channel for the suite:
// one listener on the host's address on the pods' bridge, and each box's
// dial file with its own credential.
type tcpChannel struct{ ch *agentconn.Channel }

func newTCPChannel(t *testing.T, hostIP string) tcpChannel {
	t.Helper()
	m, err := agentauth.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(hostIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	ch := agentconn.NewChannel(ln, m, []string{ln.Addr().String()}, slog.New(slog.DiscardHandler))
	go ch.Serve()
	t.Cleanup(func() { ch.Close() })
	return tcpChannel{ch}
}

func (c tcpChannel) Prepare(t *testing.T, s *driver.Spec) { s.AgentDial = c.ch.Dial(s.ID) }

func (c tcpChannel) Listen(t *testing.T, s driver.Spec) *agentconn.Conn {
	t.Helper()
	// The run dir's socket is never seen by the box (the driver mounts no
	// run dir of the node's): the agent can reach only the TCP listener.
	conn, err := agentconn.Listen(s.ID, filepath.Join(s.HostRunDir, driver.AgentSocket), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := c.ch.Register(s.ID)
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	if err := conn.AddListener(ln, true); err != nil {
		conn.Close()
		t.Fatal(err)
	}
	return conn
}

// TestConformanceTCP runs the suite as on a cluster of many nodes: each
// box's agent dials the daemon's TCP listener with TLS and its own
// credential, from the dial file the driver mounts from the box's record
// Secret; and its workspace is a claim of a StorageClass, whose
// provisioner makes the volume.
func TestConformanceTCP(t *testing.T) {
	class := testk8s.Cluster(t).StorageClass
	d, image, env := clusterDriverOn(t, false, func(c *kubernetes.Config) { c.WorkspaceHostDir, c.StorageClass = "", class })
	ch := newTCPChannel(t, env.HostIP)
	drivertest.Run(t, drivertest.Harness{
		Driver:  d,
		Runtime: wire.RuntimeRunc,
		Channel: ch,
		Agents:  agentsOf(d),
		Spec: func(t *testing.T) driver.Spec {
			id := randomID(t)
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := d.Destroy(ctx, id); err != nil {
					t.Errorf("cleanup sandbox %s: %v", id, err)
				}
			})
			return driver.Spec{ID: id, Image: image, Persist: true, Runtime: wire.RuntimeRunc}
		},
		MissingImage: "127.0.0.1:1/hotcell/missing:latest",
	})
}

// TestConformance runs the driver suite on the real test cluster, with the
// real agent as each box's PID 1 (copied in by the init container), once
// per runtime the cluster offers (the test cluster offers gvisor when its
// gVisor shim is built: TestRuntimeGVisor requires it, TestRuntimeRefused
// checks a runtime whose class is missing).
func TestConformance(t *testing.T) {
	d, image := clusterDriver(t)
	info, err := d.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != kubernetes.Name || !slices.Contains(info.Runtimes, wire.RuntimeRunc) {
		t.Fatalf("info %+v: want the kubernetes driver with runc", info)
	}
	agents := agentsOf(d)
	for _, rt := range info.Runtimes {
		t.Run(rt, func(t *testing.T) {
			drivertest.Run(t, drivertest.Harness{
				Driver:  d,
				Runtime: rt,
				Agents:  agents,
				Spec: func(t *testing.T) driver.Spec {
					id := randomID(t)
					t.Cleanup(func() {
						ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
						defer cancel()
						if err := d.Destroy(ctx, id); err != nil {
							t.Errorf("cleanup sandbox %s: %v", id, err)
						}
					})
					return driver.Spec{ID: id, Image: image, Persist: true, Runtime: rt}
				},
				// No node has it and the pull policy is Never: nothing is pulled.
				MissingImage: "127.0.0.1:1/hotcell/missing:latest",
			})
		})
	}
}
