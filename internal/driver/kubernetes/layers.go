package kubernetes

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"
)

// A commit of a box whose image the driver made (a sandbox of a saved
// template, of a built one, of a snapshot) pushes only what the box
// changed: its image is the base image's layers, which the registry has,
// and one layer more. The base image's files are indexed (their metadata
// and content hashes, its layers applied in order); the box's root
// filesystem is read as a tar, as for a flat commit, and an entry whose
// path the base has the same is left out; a path of the base the box no
// longer has gets a whiteout. The base's layers plus that layer hold
// exactly what the flat image would.

// baseEntry is what a base image has at a path.
type baseEntry struct {
	typ      byte
	mode     int64
	uid, gid int
	link     string
	size     int64
	sum      [32]byte // a regular file's content
	devMajor int64
	devMinor int64
}

// baseIndex is a base image's files by path (cleaned, relative: "etc/hosts").
type baseIndex map[string]baseEntry

// errFlat is a box the diff cannot describe (a hard link to a file of the
// base it left out): the commit is flat.
var errFlat = errors.New("the box's changes need a flat image")

// indexLayer applies one layer (an uncompressed tar) to idx: its
// whiteouts remove what the layers under it have, then its entries are
// added.
func indexLayer(idx baseIndex, r io.Reader) error {
	add := baseIndex{}
	var gone, opaque []string
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read a layer of the base image: %w", err)
		}
		name := path.Clean("/" + h.Name)[1:]
		if name == "" {
			continue
		}
		dir, base := path.Split(name)
		dir = strings.TrimSuffix(dir, "/")
		switch {
		case base == ".wh..wh..opq":
			opaque = append(opaque, dir)
			continue
		case strings.HasPrefix(base, ".wh."):
			gone = append(gone, path.Join(dir, strings.TrimPrefix(base, ".wh.")))
			continue
		}
		e := baseEntry{typ: h.Typeflag, mode: h.Mode & 0o7777, uid: h.Uid, gid: h.Gid, link: h.Linkname, size: h.Size, devMajor: h.Devmajor, devMinor: h.Devminor}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeRegA:
			e.typ = tar.TypeReg
			hs := sha256.New()
			if _, err := io.Copy(hs, tr); err != nil {
				return fmt.Errorf("read a layer of the base image: %w", err)
			}
			copy(e.sum[:], hs.Sum(nil))
		case tar.TypeLink:
			// A hard link has its target's content.
			t := path.Clean("/" + h.Linkname)[1:]
			te, ok := add[t]
			if !ok {
				te, ok = idx[t]
			}
			if !ok {
				return fmt.Errorf("a layer of the base image links %s to %s, which it lacks: %w", name, t, errFlat)
			}
			e = te
		}
		add[name] = e
	}
	remove := func(p string, self bool) {
		for k := range idx {
			if (self && k == p) || strings.HasPrefix(k, p+"/") || p == "" {
				delete(idx, k)
			}
		}
	}
	for _, p := range gone {
		remove(p, true)
	}
	for _, p := range opaque {
		remove(p, false)
	}
	for k, e := range add {
		idx[k] = e
	}
	return nil
}

// spoolInMemory is the largest file diffLayer holds in memory while it
// learns whether it changed; a larger one goes to a temporary file.
const spoolInMemory = 4 << 20

// diffLayer writes to w the layer that makes idx's files the root
// filesystem's, which it reads from root (a whole tar: one cut short is an
// error). A directory, file, link or device the base has the same (type,
// mode, owner, link, content) is left out, a directory unless what is
// under it is written; every path of the base root lacks gets a whiteout, once for a
// directory and what is under it.
func diffLayer(w io.Writer, root io.Reader, idx baseIndex) error {
	end := &tail{}
	src := io.TeeReader(root, end)
	tr := tar.NewReader(src)
	tw := tar.NewWriter(w)
	seen := map[string]bool{}
	dirs := map[string]bool{} // the box's directories
	written := map[string]bool{}
	// A directory the base has the same is written only when an entry
	// under it is (a layer's entries come after their parents).
	pending := map[string]*tar.Header{}
	flush := func(name string) error {
		var chain []string
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			if _, ok := pending[d]; ok {
				chain = append(chain, d)
			}
		}
		for i := len(chain) - 1; i >= 0; i-- {
			if err := writeEntry(tw, pending[chain[i]], nil); err != nil {
				return err
			}
			delete(pending, chain[i])
		}
		return nil
	}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read the root filesystem's tar: %w", err)
		}
		name := path.Clean("/" + h.Name)[1:]
		if name == "" {
			continue
		}
		seen[name] = true
		dirs[name] = h.Typeflag == tar.TypeDir
		if h.Typeflag == tar.TypeRegA {
			h.Typeflag = tar.TypeReg
		}
		b, inBase := idx[name]
		same := inBase && b.typ == h.Typeflag && b.mode == h.Mode&0o7777 && b.uid == h.Uid && b.gid == h.Gid
		switch h.Typeflag {
		case tar.TypeDir:
			if same {
				pending[name] = h
				continue
			}
		case tar.TypeReg:
			body, sum, err := spool(tr, h.Size)
			if err != nil {
				return err
			}
			if same && b.size == h.Size && b.sum == sum {
				body.Close()
				continue
			}
			err = flush(name)
			if err == nil {
				err = writeEntry(tw, h, body)
			}
			body.Close()
			if err != nil {
				return err
			}
			written[name] = true
			continue
		case tar.TypeLink:
			t := path.Clean("/" + h.Linkname)[1:]
			if !written[t] {
				// Its target is the base's: the link is the base's too,
				// or the diff cannot say what it is.
				if te, ok := idx[t]; ok && inBase && b == te {
					continue
				}
				return fmt.Errorf("%s is a hard link to %s, which the base has unchanged: %w", name, t, errFlat)
			}
		case tar.TypeSymlink:
			if same && b.link == h.Linkname {
				continue
			}
		default:
			if same && b.devMajor == h.Devmajor && b.devMinor == h.Devminor {
				continue
			}
		}
		if err := flush(name); err != nil {
			return err
		}
		if err := writeEntry(tw, h, nil); err != nil {
			return err
		}
		written[name] = true
	}
	if err := readEnd(io.Discard, src, end); err != nil {
		return err
	}
	// A whiteout for each path of the base that is gone, the topmost only.
	for _, p := range slices.Sorted(maps.Keys(idx)) {
		if seen[p] || goneAbove(p, idx, seen, dirs) {
			continue
		}
		if err := flush(p); err != nil {
			return err
		}
		dir, base := path.Split(p)
		if err := tw.WriteHeader(&tar.Header{Name: dir + ".wh." + base, Typeflag: tar.TypeReg, Mode: 0o644}); err != nil {
			return err
		}
	}
	return tw.Close()
}

// goneAbove says whether a directory above p that the base has is gone
// too (its whiteout covers p), or is no directory in the box (what
// replaced it hides p).
func goneAbove(p string, idx baseIndex, seen, dirs map[string]bool) bool {
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		if _, ok := idx[d]; ok && (!seen[d] || !dirs[d]) {
			return true
		}
	}
	return false
}

// writeEntry writes h, and body's content for a regular file.
func writeEntry(tw *tar.Writer, h *tar.Header, body io.Reader) error {
	h.Format = tar.FormatPAX
	h.AccessTime, h.ChangeTime = time.Time{}, time.Time{}
	if h.Typeflag != tar.TypeReg {
		h.Size = 0
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if body != nil {
		if _, err := io.Copy(tw, body); err != nil {
			return err
		}
	}
	return nil
}

// spool reads a file's content of size bytes, hashing it, into memory or
// (past spoolInMemory) a temporary file, and returns it to be read again.
func spool(r io.Reader, size int64) (io.ReadCloser, [32]byte, error) {
	var sum [32]byte
	hs := sha256.New()
	if size <= spoolInMemory {
		b, err := io.ReadAll(io.TeeReader(r, hs))
		if err != nil {
			return nil, sum, fmt.Errorf("read the root filesystem's tar: %w", err)
		}
		copy(sum[:], hs.Sum(nil))
		return io.NopCloser(bytes.NewReader(b)), sum, nil
	}
	f, err := os.CreateTemp("", "hotcell-commit-*")
	if err != nil {
		return nil, sum, err
	}
	os.Remove(f.Name()) // gone once closed
	if _, err := io.Copy(f, io.TeeReader(r, hs)); err != nil {
		f.Close()
		return nil, sum, fmt.Errorf("read the root filesystem's tar: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, sum, err
	}
	copy(sum[:], hs.Sum(nil))
	return f, sum, nil
}

// baseImage is a made image a commit builds on: its manifest's layers,
// its config, and its files.
type baseImage struct {
	repo   string
	layers []descriptor
	config imageConfig
	index  baseIndex
}

// bases keeps the indexes of recent base images by manifest digest: a
// sandbox of a template is committed again and again.
type bases struct {
	mu      sync.Mutex
	byID    map[string]*baseImage
	recency []string
}

const basesKept = 8

func (b *bases) get(digest string) *baseImage {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.byID[digest]
}

func (b *bases) put(digest string, img *baseImage) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byID == nil {
		b.byID = map[string]*baseImage{}
	}
	if _, ok := b.byID[digest]; !ok {
		b.recency = append(b.recency, digest)
	}
	b.byID[digest] = img
	for len(b.recency) > basesKept {
		delete(b.byID, b.recency[0])
		b.recency = b.recency[1:]
	}
}

// loadBase reads repo:tag's manifest and config and indexes its layers.
func (r *registry) loadBase(ctx context.Context, cache *bases, repo, tag string) (*baseImage, error) {
	digest, err := r.manifestDigest(ctx, repo, tag)
	if err != nil {
		return nil, err
	}
	if img := cache.get(digest); img != nil {
		return img, nil
	}
	var m manifest
	if err := r.getJSON(ctx, repo, "manifests/"+digest, mediaManifest, &m); err != nil {
		return nil, err
	}
	img := &baseImage{repo: repo, layers: m.Layers, index: baseIndex{}}
	if err := r.getJSON(ctx, repo, "blobs/"+m.Config.Digest, "", &img.config); err != nil {
		return nil, err
	}
	if len(img.config.RootFS.DiffIDs) != len(m.Layers) {
		return nil, fmt.Errorf("base image %s: %d layers, %d diff ids: %w", r.ref(repo, tag), len(m.Layers), len(img.config.RootFS.DiffIDs), errFlat)
	}
	for _, l := range m.Layers {
		if l.MediaType != mediaLayer {
			return nil, fmt.Errorf("base image %s: a layer of type %s: %w", r.ref(repo, tag), l.MediaType, errFlat)
		}
		body, err := r.getBlob(ctx, repo, l.Digest)
		if err != nil {
			return nil, err
		}
		zr, err := gzip.NewReader(body)
		if err == nil {
			err = indexLayer(img.index, zr)
		}
		body.Close()
		if err != nil {
			return nil, fmt.Errorf("base image %s: %w", r.ref(repo, tag), err)
		}
	}
	cache.put(digest, img)
	return img, nil
}

// getBlob streams a blob of repo.
func (r *registry) getBlob(ctx context.Context, repo, digest string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url(repo, "blobs/"+digest), nil)
	if err != nil {
		return nil, err
	}
	what := "read " + digest + " of " + r.name + "/" + repo
	resp, err := r.do(req)
	if err != nil {
		return nil, r.unreachable(what, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, r.answer(what, resp)
	}
	return resp.Body, nil
}

// getJSON decodes a manifest (accept its media type) or a blob of repo.
func (r *registry) getJSON(ctx context.Context, repo, rest, accept string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url(repo, rest), nil)
	if err != nil {
		return err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	what := "read " + rest + " of " + r.name + "/" + repo
	resp, err := r.do(req)
	if err != nil {
		return r.unreachable(what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return r.answer(what, resp)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(out)
}

// mountBlob makes a blob of from a blob of repo too (a cross-repository
// mount): the registry has it, nothing is uploaded. A registry that
// starts an upload instead did not mount it: the upload is dropped, and
// the commit is flat.
func (r *registry) mountBlob(ctx context.Context, repo, from, digest string) error {
	u := r.url(repo, "blobs/uploads/") + "?" + url.Values{"mount": {digest}, "from": {r.prefix + from}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return err
	}
	what := "mount " + digest + " of " + r.name + "/" + from + " in " + repo
	resp, err := r.do(req)
	if err != nil {
		return r.unreachable(what, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusCreated:
		return nil
	case http.StatusAccepted:
		if loc, err := resp.Request.URL.Parse(resp.Header.Get("Location")); err == nil {
			r.cancelUpload(ctx, loc.String())
		}
		return fmt.Errorf("%s: the registry did not mount it: %w", what, errFlat)
	}
	return r.answer(what, resp)
}
