package agent

import (
	"errors"
	"io/fs"
	"net/url"
	"os"
	"strconv"
	"syscall"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/fspath"
)

// resolve validates p with fspath and resolves relative paths against the
// handler's workspace (which tests point at a temp dir).
func (h *handler) resolve(field, p string) (string, error) {
	return fspath.ResolveIn(h.workspace, field, p)
}

// queryPath reads the required path parameter name.
func (h *handler) queryPath(q url.Values, name string) (string, error) {
	if !q.Has(name) {
		return "", errdefs.Invalid(name, "query parameter is required")
	}
	return h.resolve(name, q.Get(name))
}

// queryInt64 reads a non-negative integer parameter; absent returns def.
func queryInt64(q url.Values, name string, def int64) (int64, error) {
	if !q.Has(name) {
		return def, nil
	}
	s := q.Get(name)
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errdefs.Invalid(name, "%q is not an integer", s)
	}
	if v < 0 {
		return 0, errdefs.Invalid(name, "must not be negative, got %d", v)
	}
	return v, nil
}

// queryBool reads a boolean parameter; absent returns false. A bare
// "?recursive" means true, as in most HTTP APIs.
func queryBool(q url.Values, name string) (bool, error) {
	if !q.Has(name) {
		return false, nil
	}
	s := q.Get(name)
	if s == "" {
		return true, nil
	}
	v, err := strconv.ParseBool(s)
	if err != nil {
		return false, errdefs.Invalid(name, "%q is not a boolean", s)
	}
	return v, nil
}

// fileRange is the offset/length of a ranged read; length -1 means to the end.
type fileRange struct {
	offset, length int64
}

func parseRange(q url.Values) (fileRange, error) {
	off, err := queryInt64(q, "offset", 0)
	if err != nil {
		return fileRange{}, err
	}
	n, err := queryInt64(q, "length", -1)
	if err != nil {
		return fileRange{}, err
	}
	return fileRange{offset: off, length: n}, nil
}

// fsErr turns a file system error into a classified error whose message is
// "op path: reason" and whose class decides the status. The cause stays
// reachable with errors.Is.
func fsErr(op, p string, err error) error {
	reason := err
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		reason = pe.Err
	case errors.As(err, &le):
		reason = le.Err
	}
	var class error
	var errno syscall.Errno
	switch {
	case errors.Is(err, fs.ErrNotExist):
		class = errdefs.ErrNotFound
	case errors.Is(err, fs.ErrExist):
		class = errdefs.ErrAlreadyExists
	case errors.As(err, &errno):
		switch errno {
		case syscall.ENOTEMPTY, syscall.EBUSY, syscall.ETXTBSY:
			class = errdefs.ErrConflict
		case syscall.EACCES, syscall.EPERM, syscall.EROFS:
			class = errdefs.ErrPermissionDenied
		case syscall.ENOTDIR, syscall.EISDIR, syscall.EINVAL, syscall.ENAMETOOLONG, syscall.ELOOP, syscall.EXDEV:
			class = errdefs.ErrInvalidArgument
		case syscall.ENOSPC, syscall.EDQUOT, syscall.EFBIG:
			class = errdefs.ErrTooLarge
		}
	}
	return &classified{msg: op + " " + p + ": " + reason.Error(), class: class, cause: err}
}
