package agent

import (
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hotcell/hotcell/internal/errdefs"
)

// File metadata: string pairs kept with a file as extended attributes
// user.e2b.<key>, as E2B's envd keeps them (its X-Metadata-* upload
// headers), so they live and die with the file. A write carries them in
// the metadata parameter (a JSON object); GET /v1/fs/entries returns them
// with metadata=true.

const (
	metadataXattrPrefix = "user.e2b."
	// maxMetadata bounds a write's metadata (ext4 keeps all of a file's
	// attributes in one 4 KiB block).
	maxMetadata  = 3 << 10
	maxXattrList = 64 << 10
)

// parseMetadata reads the optional metadata parameter: keys are tokens
// (the characters of an HTTP header name), values printable ASCII.
func parseMetadata(q url.Values) (map[string]string, error) {
	if !q.Has("metadata") {
		return nil, nil
	}
	raw := q.Get("metadata")
	if len(raw) > maxMetadata {
		return nil, errdefs.Invalid("metadata", "is larger than %d bytes", maxMetadata)
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return nil, errdefs.Invalid("metadata", "want a JSON object of strings: %v", err)
	}
	for k, v := range m {
		if !metadataKey(k) {
			return nil, errdefs.Invalid("metadata", "key %.64q: want letters, digits and !#$%%&'*+-.^_`|~", k)
		}
		for _, r := range v {
			if r < 0x20 || r > 0x7e {
				return nil, errdefs.Invalid("metadata", "value of %q: want printable ASCII", k)
			}
		}
	}
	return m, nil
}

func metadataKey(k string) bool {
	if k == "" || len(k) > 200 {
		return false
	}
	for _, r := range k {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("!#$%&'*+-.^_`|~", r):
		default:
			return false
		}
	}
	return true
}

// carryMetadata gives tmp the metadata of the file it replaces (old, when
// there is one) and then m's pairs over it: a rewrite keeps what the file
// had, as an in-place write would.
func carryMetadata(tmp *os.File, old string, m map[string]string) error {
	if old != "" {
		for k, v := range readMetadata(old) {
			if _, ok := m[k]; !ok {
				_ = unix.Fsetxattr(int(tmp.Fd()), metadataXattrPrefix+k, []byte(v), 0)
			}
		}
	}
	for k, v := range m {
		if err := unix.Fsetxattr(int(tmp.Fd()), metadataXattrPrefix+k, []byte(v), 0); err != nil {
			if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP) {
				return errdefs.Invalid("metadata", "the file system of %s does not keep extended attributes", tmp.Name())
			}
			return fsErr("set metadata of", tmp.Name(), err)
		}
	}
	return nil
}

// readMetadata returns p's metadata (nil if none, or if its file system
// keeps none). Links are not followed.
func readMetadata(p string) map[string]string {
	buf := make([]byte, 4<<10)
	n, err := unix.Llistxattr(p, buf)
	if errors.Is(err, unix.ERANGE) {
		buf = make([]byte, maxXattrList)
		n, err = unix.Llistxattr(p, buf)
	}
	if err != nil || n <= 0 {
		return nil
	}
	var m map[string]string
	val := make([]byte, 4<<10)
	for name := range strings.SplitSeq(string(buf[:n]), "\x00") {
		key, ok := strings.CutPrefix(name, metadataXattrPrefix)
		if !ok || key == "" {
			continue
		}
		k, err := unix.Lgetxattr(p, name, val)
		if err != nil {
			continue
		}
		if m == nil {
			m = map[string]string{}
		}
		m[key] = string(val[:k])
	}
	return m
}
