package kubernetes

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

var _ driver.Snapshotter = (*Driver)(nil)

// Snapshots and templates saved from a sandbox are images the driver
// makes. A pod's root filesystem is its node's, out of the Kubernetes
// API's reach, so the box's agent streams it (GET /v1/rootfs) and the
// driver pushes it, one layer, to the registry of Config.Registry, which
// the nodes pull it back from. Unlike Docker's commit, the box is not
// frozen meanwhile (a pod cannot be): a file written during the commit may
// be caught half-written.

// madeRepos are the repositories of the images hotcell makes, named as
// the daemon names them (backup.SnapshotRepo, templates.Repo): with a
// registry, the driver keeps them there.
var madeRepos = []string{"hotcell/snapshot", "hotcell-tpl/"}

// DefaultMaxImageBytes bounds a root filesystem's tar.
const DefaultMaxImageBytes = 32 << 30

// AgentFunc reaches a running sandbox's agent.
type AgentFunc func(ctx context.Context, id string) (*agentconn.Conn, error)

// agents is where Commit reaches boxes' agents; the daemon's sandbox
// manager holds their connections and is made after the driver.
type agents struct {
	mu sync.RWMutex
	fn AgentFunc
}

// UseAgents tells the driver how to reach a box's agent, which a commit
// needs.
func (d *Driver) UseAgents(fn AgentFunc) {
	d.agents.mu.Lock()
	d.agents.fn = fn
	d.agents.mu.Unlock()
}

func (d *Driver) agent(ctx context.Context, id string) (*agentconn.Conn, error) {
	d.agents.mu.RLock()
	fn := d.agents.fn
	d.agents.mu.RUnlock()
	if fn == nil {
		return nil, fmt.Errorf("commit sandbox %s: the driver reaches no agent (UseAgents): %w", id, errdefs.ErrUnavailable)
	}
	return fn(ctx, id)
}

// CanSnapshot says whether the driver can make images: it has a registry.
func (d *Driver) CanSnapshot() bool { return d.reg != nil }

// made returns the repository and tag of ref when it is an image hotcell
// makes (a name of madeRepos with a tag, no registry of its own).
func made(ref string) (repo, tag string, ok bool) {
	n, err := reference.ParseNormalizedNamed(ref)
	if err != nil || reference.Domain(n) != "docker.io" {
		return "", "", false
	}
	t, isTagged := n.(reference.Tagged)
	if !isTagged || strings.Contains(ref, "@") {
		return "", "", false
	}
	repo = reference.Path(n)
	for _, m := range madeRepos {
		if repo == m || (strings.HasSuffix(m, "/") && strings.HasPrefix(repo, m)) {
			return repo, t.Tag(), true
		}
	}
	return "", "", false
}

// pullRef is the reference a pod runs ref by: a made image's in the
// registry, any other as it is.
func (d *Driver) pullRef(ref string) string {
	if d.reg == nil {
		return ref
	}
	if repo, tag, ok := made(ref); ok {
		return d.reg.ref(repo, tag)
	}
	return ref
}

// pullPolicy is a box's container's: a made image is pulled from the
// registry when the node lacks it, whatever the policy for the others
// (Never on a cluster that has no registry for them). Its tag names one
// commit, never moved, so IfNotPresent is always right.
func (d *Driver) pullPolicy(ref string) corev1.PullPolicy {
	if _, _, ok := made(ref); ok && d.reg != nil {
		return corev1.PullIfNotPresent
	}
	return d.cfg.PullPolicy
}

// Commit pushes box id's root filesystem, as its agent reads it now, to
// the registry as image ref, labelled with labels and LabelManaged. The
// box goes on running.
func (d *Driver) Commit(ctx context.Context, id, ref string, labels map[string]string) error {
	return d.CommitWithEnv(ctx, id, ref, labels, nil)
}

// CommitWithEnv is Commit with env laid over the box's own in the image's
// config (a build's ENVs).
func (d *Driver) CommitWithEnv(ctx context.Context, id, ref string, labels, env map[string]string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if d.reg == nil {
		return fmt.Errorf("commit sandbox %s: the kubernetes driver keeps the images it makes in a registry, and none is set (kubernetes_registry; docs/kubernetes.md, Snapshots): %w", id, errdefs.ErrNotImplemented)
	}
	repo, tag, ok := made(ref)
	if !ok {
		return errdefs.Invalid("image", "%q is not an image of hotcell's own (%s)", ref, strings.Join(madeRepos, ", "))
	}
	pod, err := d.getPod(ctx, id)
	if err != nil {
		return err
	}
	if pod == nil || pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil {
		if _, err := d.record(ctx, id); err != nil {
			return err
		}
		return fmt.Errorf("commit sandbox %s: its pod is not running: %w", id, errdefs.ErrConflict)
	}
	conn, err := d.agent(ctx, id)
	if err != nil {
		return err
	}
	cfg := imageConfig{Created: time.Now().UTC(), OS: "linux", Architecture: d.nodeArch(ctx, pod.Spec.NodeName)}
	if cfg.Config.Env, err = boxEnv(ctx, conn, env); err != nil {
		return fmt.Errorf("commit sandbox %s: %w", id, err)
	}
	cfg.Config.Labels = map[string]string{driver.LabelManaged: "true"}
	for k, v := range labels {
		cfg.Config.Labels[k] = v
	}
	cfg.History = []history{{cfg.Created, "hotcell: the root filesystem of sandbox " + id}}
	max := d.cfg.MaxImageBytes
	if max <= 0 {
		max = DefaultMaxImageBytes
	}
	// Over the box's own image's layers when the driver made that image,
	// else (or when that cannot be done) flat.
	if base := d.commitBase(ctx, pod); base != nil {
		err := d.pushDiff(ctx, conn, repo, tag, max, cfg, base)
		if err == nil || ctx.Err() != nil || errors.Is(err, errdefs.ErrInvalidArgument) {
			if err != nil {
				return fmt.Errorf("commit sandbox %s as %s: %w", id, d.reg.ref(repo, tag), err)
			}
			return nil
		}
		slog.Warn("kubernetes: a commit over its base image's layers failed; pushing a flat image", "sandbox", id, "image", d.reg.ref(repo, tag), "err", err)
	}
	body, err := rootfs(ctx, conn)
	if err != nil {
		return fmt.Errorf("commit sandbox %s: read its root filesystem: %w", id, err)
	}
	defer body.Close()
	if err := d.reg.pushImage(ctx, repo, tag, body, max, cfg, nil); err != nil {
		return fmt.Errorf("commit sandbox %s as %s: %w", id, d.reg.ref(repo, tag), err)
	}
	return nil
}

// rootfs streams a box's root filesystem (the agent's GET /v1/rootfs).
func rootfs(ctx context.Context, conn *agentconn.Conn) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "/v1/rootfs", nil)
	if err != nil {
		return nil, err
	}
	resp, err := conn.Send(req)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// commitBase is the made image pod's box runs, indexed, or nil for an
// image the driver did not make (or one it cannot read now: the commit
// is flat then).
func (d *Driver) commitBase(ctx context.Context, pod *corev1.Pod) *baseImage {
	for _, c := range pod.Spec.Containers {
		if c.Name != containerBox {
			continue
		}
		ref, ok := strings.CutPrefix(c.Image, d.reg.name+"/")
		if !ok {
			return nil
		}
		repo, tag, ok := made(ref)
		if !ok {
			return nil
		}
		base, err := d.reg.loadBase(ctx, &d.bases, repo, tag)
		if err != nil {
			slog.Warn("kubernetes: the box's image cannot be read as a base; its commit is flat", "image", c.Image, "err", err)
			return nil
		}
		return base
	}
	return nil
}

// pushDiff pushes the box's root filesystem as one layer over base's: what
// the box changed of base (diffLayer).
func (d *Driver) pushDiff(ctx context.Context, conn *agentconn.Conn, repo, tag string, max int64, cfg imageConfig, base *baseImage) error {
	body, err := rootfs(ctx, conn)
	if err != nil {
		return fmt.Errorf("read its root filesystem: %w", err)
	}
	defer body.Close()
	pr, pw := io.Pipe()
	defer pr.CloseWithError(errUploadEnded)
	go func() { pw.CloseWithError(diffLayer(pw, &limitedReader{r: body, left: max}, base.index)) }()
	// The diff is no larger than the root filesystem, with a whiteout
	// for each path of the base that went.
	return d.reg.pushImage(ctx, repo, tag, pr, max+int64(len(base.index))*1024, cfg, base)
}

// boxEnv is the image config's Env: the box's own env (the image's and
// the pod's) without what the driver and the cluster set in every pod,
// with over laid over it.
func boxEnv(ctx context.Context, conn *agentconn.Conn, over map[string]string) ([]string, error) {
	var got wire.SetEnvRequest
	if err := conn.DoJSON(ctx, http.MethodGet, "/v1/env", nil, &got); err != nil {
		return nil, fmt.Errorf("read the box's env: %w", err)
	}
	if got.Env == nil {
		got.Env = map[string]string{}
	}
	for k, v := range over {
		got.Env[k] = v
	}
	var env []string
	for k, v := range got.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) ||
			k == "HOSTNAME" || strings.HasPrefix(k, "HOTCELL_") || strings.HasPrefix(k, "KUBERNETES_") {
			continue
		}
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	return env, nil
}

// nodeArch is the architecture of the node a box runs on, which its image
// is for; the daemon's own when the node cannot be read.
func (d *Driver) nodeArch(ctx context.Context, node string) string {
	if node != "" {
		if n, err := d.c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil && n.Status.NodeInfo.Architecture != "" {
			return n.Status.NodeInfo.Architecture
		}
	}
	return runtime.GOARCH
}

// RemoveImage removes a made image from the registry; one a sandbox's
// record names is a conflict. Any other ref is not the driver's to remove
// (a template registered from an image), and a missing one is no error.
// The registry frees the layers at its garbage collection.
func (d *Driver) RemoveImage(ctx context.Context, ref string) error {
	repo, tag, ok := made(ref)
	if !ok || d.reg == nil {
		return nil
	}
	pull := d.reg.ref(repo, tag)
	recs, err := d.c.CoreV1().Secrets(d.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: instanceSelector("")})
	if err != nil {
		return classify("list records", err)
	}
	for _, r := range recs.Items {
		var pod corev1.Pod
		if err := json.Unmarshal(r.Data[recordPod], &pod); err != nil {
			continue
		}
		for _, c := range pod.Spec.Containers {
			if c.Image == pull {
				return fmt.Errorf("image %s is in use by sandbox %s: %w", ref, r.Labels[driver.LabelID], errdefs.ErrConflict)
			}
		}
	}
	if err := d.reg.deleteImage(ctx, repo, tag); err != nil {
		return fmt.Errorf("remove image %s: %w", ref, err)
	}
	return nil
}

// registryCreds reads the registry's user and password from the Secret
// RegistrySecret: its .dockerconfigjson's entry for the registry's host.
func (d *Driver) registryCreds(ctx context.Context) (string, string, error) {
	name := d.cfg.RegistrySecret
	s, err := d.c.CoreV1().Secrets(d.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", "", classify("get the registry's Secret "+name+" (kubernetes_registry_secret)", err)
	}
	var doc struct {
		Auths map[string]struct {
			Username string `json:"username"`
			Password string `json:"password"`
			Auth     string `json:"auth"`
		} `json:"auths"`
	}
	if err := json.Unmarshal(s.Data[corev1.DockerConfigJsonKey], &doc); err != nil {
		return "", "", fmt.Errorf("the registry's Secret %s has no %s of the docker config's form: %w", name, corev1.DockerConfigJsonKey, errdefs.ErrInvalidArgument)
	}
	host, _, _ := strings.Cut(d.reg.name, "/")
	for k, a := range doc.Auths {
		if u, err := url.Parse("//" + strings.TrimPrefix(strings.TrimPrefix(k, "https://"), "http://")); err != nil || u.Host != host {
			continue
		}
		if a.Username == "" && a.Auth != "" {
			b, err := base64.StdEncoding.DecodeString(a.Auth)
			if err != nil {
				return "", "", fmt.Errorf("the registry's Secret %s: the auth of %s is not base64: %w", name, k, errdefs.ErrInvalidArgument)
			}
			a.Username, a.Password, _ = strings.Cut(string(b), ":")
		}
		return a.Username, a.Password, nil
	}
	return "", "", fmt.Errorf("the registry's Secret %s has no credentials for %s: %w", name, host, errdefs.ErrInvalidArgument)
}

// registryImage says whether a made image is in the registry (EnsureImage).
func (d *Driver) registryImage(ctx context.Context, ref string) (handled bool, err error) {
	repo, tag, ok := made(ref)
	if !ok || d.reg == nil {
		return false, nil
	}
	_, err = d.reg.manifestDigest(ctx, repo, tag)
	if errors.Is(err, errdefs.ErrNotFound) {
		return true, fmt.Errorf("image %s: %w", ref, err)
	}
	return true, err
}
