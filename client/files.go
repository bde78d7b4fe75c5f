package client

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"

	"github.com/hotcell/hotcell/internal/wire"
)

// RangeOptions selects part of a file for ReadFile.
type RangeOptions struct {
	Offset int64
	// Length is how many bytes to read; 0 reads to the end.
	Length int64
}

// ReadFile opens a file in a sandbox for reading; path is absolute or
// relative to /workspace. The content is streamed: the caller must close
// the returned reader.
func (c *Client) ReadFile(ctx context.Context, id, path string, rng *RangeOptions) (io.ReadCloser, error) {
	op := fmt.Sprintf("read file %s in sandbox %s", path, id)
	if err := checkID(op, id); err != nil {
		return nil, err
	}
	q := url.Values{"path": {path}}
	if rng != nil {
		if rng.Offset != 0 {
			q.Set("offset", strconv.FormatInt(rng.Offset, 10))
		}
		if rng.Length != 0 {
			q.Set("length", strconv.FormatInt(rng.Length, 10))
		}
	}
	resp, err := c.do(ctx, request{op: op, method: http.MethodGet, path: sandboxPath(id, "/files"), query: q})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// Mode returns m for MkdirRequest.Mode, where nil means the default.
func Mode(m FileMode) *FileMode { return &m }

// WriteFile writes r to a file in a sandbox, replacing it atomically. The
// content is streamed, never held whole in memory. A zero mode leaves the
// choice to the daemon (0644 for a new file).
func (c *Client) WriteFile(ctx context.Context, id, path string, r io.Reader, mode fs.FileMode) (WriteResult, error) {
	var out WriteResult
	op := fmt.Sprintf("write file %s in sandbox %s", path, id)
	if err := checkID(op, id); err != nil {
		return out, err
	}
	q := url.Values{"path": {path}}
	if mode != 0 {
		q.Set("mode", wire.FileModeOf(mode).String())
	}
	if r == nil {
		r = http.NoBody
	}
	resp, err := c.do(ctx, request{op: op, method: http.MethodPut, path: sandboxPath(id, "/files"), query: q, body: r, contentType: "application/octet-stream"})
	if err != nil {
		return out, err
	}
	defer drainClose(resp.Body)
	err = c.decode(op, resp.Body, &out)
	return out, err
}

// RemoveFile removes a file or an empty directory in a sandbox.
func (c *Client) RemoveFile(ctx context.Context, id, path string) error {
	return c.remove(ctx, id, path, false)
}

// RemoveAll removes path and everything under it in a sandbox.
func (c *Client) RemoveAll(ctx context.Context, id, path string) error {
	return c.remove(ctx, id, path, true)
}

func (c *Client) remove(ctx context.Context, id, path string, recursive bool) error {
	op := fmt.Sprintf("remove %s in sandbox %s", path, id)
	if err := checkID(op, id); err != nil {
		return err
	}
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "true")
	}
	return c.doJSON(ctx, request{op: op, method: http.MethodDelete, path: sandboxPath(id, "/files"), query: q}, nil, nil)
}

// ListDir lists a directory in a sandbox.
func (c *Client) ListDir(ctx context.Context, id, path string) (FileList, error) {
	var out FileList
	op := fmt.Sprintf("list %s in sandbox %s", path, id)
	if err := checkID(op, id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodGet, path: sandboxPath(id, "/fs/list"), query: url.Values{"path": {path}}}, nil, &out)
	return out, err
}

// Stat describes one path in a sandbox without following a final symlink.
func (c *Client) Stat(ctx context.Context, id, path string) (FileInfo, error) {
	var out FileInfo
	op := fmt.Sprintf("stat %s in sandbox %s", path, id)
	if err := checkID(op, id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodGet, path: sandboxPath(id, "/fs/stat"), query: url.Values{"path": {path}}}, nil, &out)
	return out, err
}

// Mkdir creates a directory in a sandbox.
func (c *Client) Mkdir(ctx context.Context, id string, req MkdirRequest) (FileInfo, error) {
	var out FileInfo
	op := fmt.Sprintf("make directory %s in sandbox %s", req.Path, id)
	if err := checkID(op, id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodPost, path: sandboxPath(id, "/fs/mkdir")}, req, &out)
	return out, err
}

// Move renames a file or directory in a sandbox.
func (c *Client) Move(ctx context.Context, id string, req MoveRequest) (FileInfo, error) {
	var out FileInfo
	op := fmt.Sprintf("move %s to %s in sandbox %s", req.From, req.To, id)
	if err := checkID(op, id); err != nil {
		return out, err
	}
	err := c.doJSON(ctx, request{op: op, method: http.MethodPost, path: sandboxPath(id, "/fs/move")}, req, &out)
	return out, err
}

// PutArchive extracts the tar stream r into directory dir of a sandbox.
// The archive is streamed, never held whole in memory.
func (c *Client) PutArchive(ctx context.Context, id, dir string, r io.Reader) (ArchiveResult, error) {
	var out ArchiveResult
	op := fmt.Sprintf("extract archive into %s in sandbox %s", dir, id)
	if err := checkID(op, id); err != nil {
		return out, err
	}
	resp, err := c.do(ctx, request{op: op, method: http.MethodPut, path: sandboxPath(id, "/archive"), query: url.Values{"path": {dir}}, body: r, contentType: "application/x-tar"})
	if err != nil {
		return out, err
	}
	defer drainClose(resp.Body)
	err = c.decode(op, resp.Body, &out)
	return out, err
}

// GetArchive returns directory dir of a sandbox as a tar stream, entries
// relative to dir. The archive comes from inside the sandbox and is
// untrusted: never extract it without checking each entry's path. The
// caller must close the returned reader.
func (c *Client) GetArchive(ctx context.Context, id, dir string) (io.ReadCloser, error) {
	op := fmt.Sprintf("archive %s in sandbox %s", dir, id)
	if err := checkID(op, id); err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, request{op: op, method: http.MethodGet, path: sandboxPath(id, "/archive"), query: url.Values{"path": {dir}}})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}
