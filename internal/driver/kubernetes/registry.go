package kubernetes

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/distribution/reference"

	"github.com/hotcell/hotcell/internal/errdefs"
)

// A registry is where the driver keeps the images it makes (snapshots,
// templates saved from a sandbox): a pod's root filesystem is the node's,
// so the driver pushes it to a registry the nodes pull from, through the
// OCI distribution API (https://github.com/opencontainers/distribution-spec).
type registry struct {
	// name is the registry as image references name it, as the nodes
	// pull: host[:port] with an optional path prefix.
	name string
	// base is the endpoint the driver pushes to: scheme://host[:port].
	base   *url.URL
	prefix string // name's path, "" or "a/b/"
	client *http.Client
}

// Media types of what the driver pushes.
const (
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// newRegistry checks a registry's name (as nodes pull it) and push URL
// (empty: https://host of the name).
func newRegistry(name, pushURL string) (*registry, error) {
	name = strings.TrimSuffix(name, "/")
	host, prefix, _ := strings.Cut(name, "/")
	if host == "" || strings.Contains(name, "://") {
		return nil, errdefs.Invalid("kubernetes_registry", "%q is not a registry as image references name it (host[:port][/path])", name)
	}
	if _, err := reference.ParseNormalizedNamed(name + "/x"); err != nil {
		return nil, errdefs.Invalid("kubernetes_registry", "%q is not a registry as image references name it: %v", name, err)
	}
	if pushURL == "" {
		pushURL = "https://" + host
	}
	u, err := url.Parse(pushURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return nil, errdefs.Invalid("kubernetes_registry_url", "%q is not http(s)://host[:port]", pushURL)
	}
	u.Path = ""
	if prefix != "" {
		prefix += "/"
	}
	return &registry{name: name, base: u, prefix: prefix, client: &http.Client{}}, nil
}

// ref is the reference the nodes pull repo:tag by.
func (r *registry) ref(repo, tag string) string { return r.name + "/" + repo + ":" + tag }

func (r *registry) url(repo, rest string) string {
	return r.base.String() + "/v2/" + r.prefix + repo + "/" + rest
}

// imageConfig is the part of an OCI image config the driver writes.
type imageConfig struct {
	Created      time.Time `json:"created"`
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Config       struct {
		Env    []string          `json:"Env,omitempty"`
		Labels map[string]string `json:"Labels,omitempty"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
	History []struct {
		Created   time.Time `json:"created"`
		CreatedBy string    `json:"created_by"`
	} `json:"history"`
}

type descriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

type manifest struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Config        descriptor        `json:"config"`
	Layers        []descriptor      `json:"layers"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

// pushImage pushes a one-layer image, repo:tag, whose layer is the tar
// stream layer (compressed here, at most max bytes of tar) and whose
// config is cfg with the layer's diff id filled in.
func (r *registry) pushImage(ctx context.Context, repo, tag string, layer io.Reader, max int64, cfg imageConfig) error {
	tarSum := sha256.New()
	lr := &limitedReader{r: io.TeeReader(layer, tarSum), left: max}
	blob, err := r.uploadStream(ctx, repo, func(w io.Writer) error {
		zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
		if err != nil {
			return err
		}
		if _, err := io.Copy(zw, lr); err != nil {
			return err
		}
		return zw.Close()
	})
	if err != nil {
		return err
	}
	blob.MediaType = mediaLayer
	cfg.RootFS.Type = "layers"
	cfg.RootFS.DiffIDs = []string{digestOf(tarSum)}
	data, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	conf, err := r.uploadStream(ctx, repo, func(w io.Writer) error { _, err := w.Write(data); return err })
	if err != nil {
		return err
	}
	conf.MediaType = mediaConfig
	m, err := json.Marshal(manifest{SchemaVersion: 2, MediaType: mediaManifest, Config: conf, Layers: []descriptor{blob}, Annotations: cfg.Config.Labels})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, r.url(repo, "manifests/"+tag), bytes.NewReader(m))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", mediaManifest)
	return r.expect(req, "push the manifest of "+r.ref(repo, tag), http.StatusCreated)
}

// limitedReader fails, rather than ends, past its bound: an image cut
// short must not be pushed as if whole.
type limitedReader struct {
	r    io.Reader
	left int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		// One byte more says whether the stream goes on.
		var one [1]byte
		n, err := l.r.Read(one[:])
		if n > 0 {
			return 0, fmt.Errorf("the root filesystem is larger than the driver's bound on an image: %w", errdefs.ErrInvalidArgument)
		}
		return 0, err
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

func digestOf(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

// uploadChunk is the most of a blob one PATCH carries. The chunk is read
// whole before it is sent, so a stream that fails fails between PATCHes,
// where the upload's last Location still names it and it can be dropped.
const uploadChunk = 16 << 20

// uploadStream uploads one blob that write produces, in PATCHes of at most
// uploadChunk, and returns its digest and size. A failed upload is dropped.
func (r *registry) uploadStream(ctx context.Context, repo string, write func(io.Writer) error) (d descriptor, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url(repo, "blobs/uploads/"), nil)
	if err != nil {
		return descriptor{}, err
	}
	what := "upload to " + r.name + "/" + repo
	loc, err := r.location(req, "start an "+what)
	if err != nil {
		return descriptor{}, err
	}
	defer func() {
		if err != nil {
			r.cancelUpload(ctx, loc)
		}
	}()
	pr, pw := io.Pipe()
	defer pr.CloseWithError(errUploadEnded) // the writer stops if we do
	sum := sha256.New()
	go func() { pw.CloseWithError(write(io.MultiWriter(pw, sum))) }()
	buf := make([]byte, uploadChunk)
	var size int64
	for {
		n, rerr := io.ReadFull(pr, buf)
		if n > 0 {
			req, err := http.NewRequestWithContext(ctx, http.MethodPatch, loc, bytes.NewReader(buf[:n]))
			if err != nil {
				return descriptor{}, err
			}
			req.Header.Set("Content-Type", "application/octet-stream")
			req.Header.Set("Content-Range", fmt.Sprintf("%d-%d", size, size+int64(n)-1))
			next, err := r.location(req, what)
			if err != nil {
				return descriptor{}, err
			}
			loc, size = next, size+int64(n)
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return descriptor{}, rerr
		}
	}
	d = descriptor{Digest: digestOf(sum), Size: size}
	u, err := url.Parse(loc)
	if err != nil {
		return descriptor{}, fmt.Errorf("%s: the registry's location %q: %w", what, loc, err)
	}
	q := u.Query()
	q.Set("digest", d.Digest)
	u.RawQuery = q.Encode()
	req, err = http.NewRequestWithContext(ctx, http.MethodPut, u.String(), nil)
	if err != nil {
		return descriptor{}, err
	}
	return d, r.expect(req, "finish the "+what, http.StatusCreated)
}

// cancelUpload drops an upload that failed, so the registry does not keep
// its part until its purge; it is best effort.
func (r *registry) cancelUpload(ctx context.Context, loc string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, loc, nil)
	if err != nil {
		return
	}
	if resp, err := r.client.Do(req); err == nil {
		resp.Body.Close()
	}
}

// errUploadEnded is what the stream's writer meets once the registry
// stopped reading it.
var errUploadEnded = errors.New("the upload ended")

// location sends req, expecting 202 Accepted and a Location, which it
// returns absolute.
func (r *registry) location(req *http.Request, what string) (string, error) {
	resp, err := r.client.Do(req)
	if err != nil {
		return "", r.unreachable(what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return "", r.answer(what, resp)
	}
	loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
	if err != nil || resp.Header.Get("Location") == "" {
		return "", fmt.Errorf("%s: the registry answered no usable Location (%q): %w", what, resp.Header.Get("Location"), errdefs.ErrUnavailable)
	}
	return loc.String(), nil
}

// expect sends req and wants status.
func (r *registry) expect(req *http.Request, what string, status int) error {
	resp, err := r.client.Do(req)
	if err != nil {
		return r.unreachable(what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != status {
		return r.answer(what, resp)
	}
	return nil
}

func (r *registry) unreachable(what string, err error) error {
	if errors.Is(err, errdefs.ErrInvalidArgument) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: the registry at %s did not answer (is it up, and is kubernetes_registry_url right?): %w", what, r.base, errors.Join(errdefs.ErrUnavailable, err))
}

// answer is the error of an unexpected registry answer, with the
// registry's own words (its errors document).
func (r *registry) answer(what string, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	var doc struct {
		Errors []struct{ Code, Message string } `json:"errors"`
	}
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &doc) == nil && len(doc.Errors) > 0 {
		var parts []string
		for _, e := range doc.Errors {
			parts = append(parts, e.Code+": "+e.Message)
		}
		msg = strings.Join(parts, "; ")
	}
	kind := errdefs.ErrUnavailable
	switch resp.StatusCode {
	case http.StatusNotFound:
		kind = errdefs.ErrNotFound
	case http.StatusUnauthorized, http.StatusForbidden:
		msg += " (the driver pushes without credentials: give it a registry that takes them, e.g. one reached only inside the cluster)"
	case http.StatusMethodNotAllowed:
		msg += " (a registry refuses deletes unless its storage allows them: storage.delete.enabled)"
	}
	return fmt.Errorf("%s: the registry answered %s: %s: %w", what, resp.Status, msg, kind)
}

// manifestDigest returns the digest of repo:tag's manifest; a missing one
// is ErrNotFound.
func (r *registry) manifestDigest(ctx context.Context, repo, tag string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, r.url(repo, "manifests/"+tag), nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", mediaManifest)
	resp, err := r.client.Do(req)
	what := "look up " + r.ref(repo, tag)
	if err != nil {
		return "", r.unreachable(what, err)
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return "", fmt.Errorf("image %s is not in the registry: %w", r.ref(repo, tag), errdefs.ErrNotFound)
	case resp.StatusCode != http.StatusOK:
		return "", r.answer(what, resp)
	}
	d := resp.Header.Get("Docker-Content-Digest")
	if !strings.HasPrefix(d, "sha256:") {
		return "", fmt.Errorf("%s: the registry answered no digest: %w", what, errdefs.ErrUnavailable)
	}
	return d, nil
}

// deleteImage removes repo:tag's manifest; a missing one is not an error.
// The layers stay until the registry's garbage collection.
func (r *registry) deleteImage(ctx context.Context, repo, tag string) error {
	d, err := r.manifestDigest(ctx, repo, tag)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, r.url(repo, "manifests/"+d), nil)
	if err != nil {
		return err
	}
	err = r.expect(req, "delete "+r.ref(repo, tag), http.StatusAccepted)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	return err
}
