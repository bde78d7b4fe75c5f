// Package testk8s gives tests the real single-node Kubernetes cluster that
// scripts/k8s brings up (docs/kubernetes.md). Outside CI a missing cluster
// skips the test with how to start one; with CI set it fails, as
// internal/testenv does for Docker.
package testk8s

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/testenv"
)

// DefaultEnvFile is where scripts/k8s up records the cluster's coordinates;
// HOTCELL_K8S_ENV names another file.
const DefaultEnvFile = "/var/lib/hotcell-k8s/env"

// Env is how a test reaches the cluster.
type Env struct {
	// Kubeconfig is an admin kubeconfig (system:masters).
	Kubeconfig string
	// HostIP is the host's address on the pods' bridge: pods reach the host
	// there (never on loopback), so a daemon that pods dial listens on it.
	HostIP string
	// KubectlPath is the path of a kubectl of the cluster's version.
	KubectlPath string
	// Containerd is the socket of the cluster's own containerd.
	Containerd string
	// Node is the name of the cluster's one node.
	Node string
	// Registry is the cluster's registry (host:port, plain HTTP on
	// loopback), which its node pulls from, with RegistryUser's
	// RegistryPassword on every call.
	Registry, RegistryUser, RegistryPassword string
	// StorageClass is a class whose provisioner makes volumes for claims
	// (the controller manager's hostPath one: HostPathDir on this host).
	StorageClass string
}

// HostPathDir is where the test cluster's StorageClass makes its volumes.
const HostPathDir = "/tmp/hostpath_pv"

// RegistrySecretName is the Secret RegistrySecret makes.
const RegistrySecretName = "hotcell-registry"

// RegistrySecret puts the registry's credentials in namespace ns as a
// Secret of type kubernetes.io/dockerconfigjson, RegistrySecretName, for
// the driver's kubernetes_registry_secret.
func (e *Env) RegistrySecret(t testing.TB, ns string) string {
	t.Helper()
	e.MustKubectl(t, "-n", ns, "create", "secret", "docker-registry", RegistrySecretName,
		"--docker-server="+e.Registry, "--docker-username="+e.RegistryUser, "--docker-password="+e.RegistryPassword)
	return RegistrySecretName
}

var cluster struct {
	once sync.Once
	env  *Env
	err  error
}

// Cluster returns the test cluster, once it has checked that its API server
// answers. It is shared by the whole test process.
func Cluster(t testing.TB) *Env {
	t.Helper()
	cluster.once.Do(func() { cluster.env, cluster.err = load() })
	if cluster.err != nil {
		testenv.SkipOrFail(t, "needs the test cluster (start it with: sudo scripts/k8s up): %v", cluster.err)
	}
	return cluster.env
}

func load() (*Env, error) {
	path := os.Getenv("HOTCELL_K8S_ENV")
	if path == "" {
		path = DefaultEnvFile
	}
	vars, err := readEnvFile(path)
	if err != nil {
		return nil, err
	}
	e := &Env{
		Kubeconfig:       vars["HOTCELL_K8S_KUBECONFIG"],
		HostIP:           vars["HOTCELL_K8S_HOST_IP"],
		KubectlPath:      vars["HOTCELL_K8S_KUBECTL"],
		Containerd:       vars["HOTCELL_K8S_CONTAINERD"],
		Node:             vars["HOTCELL_K8S_NODE"],
		Registry:         vars["HOTCELL_K8S_REGISTRY"],
		RegistryUser:     vars["HOTCELL_K8S_REGISTRY_USER"],
		RegistryPassword: vars["HOTCELL_K8S_REGISTRY_PASSWORD"],
		StorageClass:     vars["HOTCELL_K8S_STORAGE_CLASS"],
	}
	if e.Kubeconfig == "" || e.HostIP == "" || e.KubectlPath == "" || e.Containerd == "" || e.Node == "" || e.Registry == "" || e.RegistryPassword == "" || e.StorageClass == "" {
		return nil, fmt.Errorf("%s lacks some of HOTCELL_K8S_KUBECONFIG, _HOST_IP, _KUBECTL, _CONTAINERD, _NODE, _REGISTRY, _REGISTRY_PASSWORD, _STORAGE_CLASS (a cluster up from before them: sudo scripts/k8s down && sudo scripts/k8s up)", path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	out, err := e.kubectl(ctx, nil, "get", "--raw", "/readyz")
	if err != nil {
		return nil, fmt.Errorf("the API server does not answer: %v", err)
	}
	if strings.TrimSpace(out) != "ok" {
		return nil, fmt.Errorf("the API server is not ready: %q", out)
	}
	return e, nil
}

// readEnvFile reads KEY=VALUE lines.
func readEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	vars := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if ok && !strings.HasPrefix(k, "#") {
			vars[k] = v
		}
	}
	return vars, sc.Err()
}

// ExitError is a kubectl that ran and exited non-zero.
type ExitError struct {
	Args   []string
	Code   int
	Stderr string
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("kubectl %s: exit %d: %s", strings.Join(e.Args, " "), e.Code, strings.TrimSpace(e.Stderr))
}

func (e *Env) kubectl(ctx context.Context, stdin io.Reader, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, e.KubectlPath, append([]string{"--kubeconfig", e.Kubeconfig}, args...)...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if xe := (*exec.ExitError)(nil); errors.As(err, &xe) && ctx.Err() == nil {
		return out.String(), &ExitError{Args: args, Code: xe.ExitCode(), Stderr: errb.String()}
	}
	if err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// Kubectl runs kubectl against the cluster with stdin (nil for none) and
// returns its stdout; a non-zero exit is an *ExitError with the code and
// stderr.
func (e *Env) Kubectl(ctx context.Context, stdin io.Reader, args ...string) (string, error) {
	return e.kubectl(ctx, stdin, args...)
}

// MustKubectl is Kubectl that fails the test on any error.
func (e *Env) MustKubectl(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := e.kubectl(ctx, nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// RequireGVisor gives up on the test unless the cluster has the
// RuntimeClass gvisor, which scripts/k8s makes when its containerd runs
// gVisor's shim (docs/kubernetes.md, pitfall 10): it skips, or fails when
// CI is set, as a missing cluster does.
func (e *Env) RequireGVisor(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := e.kubectl(ctx, nil, "get", "runtimeclass", "gvisor", "-o", "name"); err != nil {
		testenv.SkipOrFail(t, "needs the test cluster's RuntimeClass gvisor (sudo scripts/k8s up makes it once gVisor's shim is built; a containerd started before reads it at its next start): %v", err)
	}
}

// Namespace creates a namespace of its own for the test, ready for pods
// (its default service account exists), and deletes it when the test ends,
// waiting until it and its pods are gone.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	ns := "hc-t-" + hex.EncodeToString(b)
	e.MustKubectl(t, "create", "namespace", ns)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		// Pods first, without a grace period: a namespace waits for its pods.
		if _, err := e.kubectl(ctx, nil, "-n", ns, "delete", "pods", "--all", "--force", "--grace-period=0", "--wait=false"); err != nil {
			t.Errorf("cleanup namespace %s: %v", ns, err)
		}
		if _, err := e.kubectl(ctx, nil, "delete", "namespace", ns, "--wait=true", "--timeout=110s"); err != nil {
			t.Errorf("cleanup namespace %s: %v", ns, err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		if _, err := e.kubectl(ctx, nil, "-n", ns, "get", "serviceaccount", "default"); err == nil {
			return ns
		}
		select {
		case <-ctx.Done():
			t.Fatalf("namespace %s: no default service account after a minute (is kube-controller-manager running? sudo scripts/k8s status)", ns)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

var imports sync.Map // image ref -> *importResult

type importResult struct {
	once sync.Once
	err  error
}

// ImportImage copies image ref from the host's Docker Engine into the
// cluster's containerd, once per test process and only when the cluster
// lacks that image ID (there is no registry: pods name it with
// imagePullPolicy Never or IfNotPresent).
func (e *Env) ImportImage(t testing.TB, ref string) {
	t.Helper()
	v, _ := imports.LoadOrStore(ref, &importResult{})
	r := v.(*importResult)
	r.once.Do(func() { r.err = e.importImage(ref) })
	if r.err != nil {
		t.Fatalf("import %s into the test cluster: %v", ref, r.err)
	}
}

func (e *Env) ctr(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ctr", append([]string{"--address", e.Containerd, "-n", "k8s.io"}, args...)...)
}

// importImage copies ref from Docker into the cluster. Another test
// process (another package) may build ref again meanwhile, moving the tag
// between the inspect and the save: the cluster then gets that newer
// build, which is as good (the same tree's), and the check follows the
// tag to it.
func (e *Env) importImage(ref string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for attempt := 0; ; attempt++ {
		id, err := dockerImageID(ctx, ref)
		if err != nil {
			return err
		}
		if e.hasImage(ctx, ref, id) {
			return nil
		}
		ierr := e.importOnce(ctx, ref)
		if ierr == nil && e.hasImage(ctx, ref, id) {
			return nil
		}
		if now, err := dockerImageID(ctx, ref); err == nil && now != id && attempt < 3 {
			continue // rebuilt meanwhile: take that build
		}
		if ierr != nil {
			return ierr
		}
		return fmt.Errorf("ctr imported %s but the cluster does not list it with config %s", ref, id)
	}
}

func dockerImageID(ctx context.Context, ref string) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", "image", "inspect", "-f", "{{.Id}}", ref).Output()
	if err != nil {
		return "", fmt.Errorf("docker image inspect %s: %w", ref, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// importOnce pipes docker save into ctr images import.
func (e *Env) importOnce(ctx context.Context, ref string) error {
	save := exec.CommandContext(ctx, "docker", "save", ref)
	imp := e.ctr(ctx, "images", "import", "-")
	pipe, err := save.StdoutPipe()
	if err != nil {
		return err
	}
	imp.Stdin = pipe
	var serr, ierr bytes.Buffer
	save.Stderr, imp.Stderr = &serr, &ierr
	if err := save.Start(); err != nil {
		return err
	}
	ie := imp.Run()
	se := save.Wait()
	if se != nil {
		return fmt.Errorf("docker save: %w: %s", se, strings.TrimSpace(serr.String()))
	}
	if ie != nil {
		return fmt.Errorf("ctr images import: %w: %s", ie, strings.TrimSpace(ierr.String()))
	}
	return nil
}

// hasImage reports whether the cluster's containerd has ref (as Docker
// names it, or normalised under docker.io/) with config digest id.
func (e *Env) hasImage(ctx context.Context, ref, id string) bool {
	out, err := e.ctr(ctx, "images", "ls").Output()
	if err != nil {
		return false
	}
	names := []string{ref, "docker.io/" + ref, "docker.io/library/" + ref}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || !slices.Contains(names, f[0]) {
			continue
		}
		m, err := e.ctr(ctx, "content", "get", f[2]).Output()
		return err == nil && bytes.Contains(m, []byte(id))
	}
	return false
}

// ImageChecker is what WaitImages needs of the Kubernetes driver.
type ImageChecker interface {
	EnsureImage(ctx context.Context, ref string, progress driver.Progress) error
}

// WaitImages waits until the test cluster's node lists every one of refs
// (the driver's EnsureImage, which a create with pull policy Never runs):
// the kubelet lists a newly imported image in the node's status within
// about 40 s (its image cache, then a status update). It fails tb after
// two minutes or on any other error.
func WaitImages(tb testing.TB, d ImageChecker, refs ...string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), 2*time.Minute)
	defer cancel()
	for _, ref := range refs {
		for {
			err := d.EnsureImage(ctx, ref, nil)
			if err == nil {
				break
			}
			if !errors.Is(err, errdefs.ErrNotFound) || ctx.Err() != nil {
				tb.Fatalf("image %s on the test cluster's node: %v", ref, err)
			}
			time.Sleep(time.Second)
		}
	}
}
