package wire

import (
	"fmt"
	"io/fs"
	"strconv"
)

// FileMode is a file's permission bits with setuid, setgid and sticky
// (0 to 07777), as chmod takes them. In JSON and query parameters it is
// octal text: "0644" ("644" is read too).
type FileMode uint32

// ParseFileMode reads octal permission bits such as "0644" or "755".
func ParseFileMode(s string) (FileMode, error) {
	v, err := strconv.ParseUint(s, 8, 32)
	if err != nil || v > 0o7777 {
		if len(s) > 16 {
			s = s[:16] + "..."
		}
		return 0, fmt.Errorf("mode %q is not an octal permission between 0000 and 7777", s)
	}
	return FileMode(v), nil
}

// FileModeOf returns the wire form of Go's mode bits; the file type bits
// are dropped.
func FileModeOf(m fs.FileMode) FileMode {
	v := FileMode(m.Perm())
	if m&fs.ModeSetuid != 0 {
		v |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		v |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		v |= 0o1000
	}
	return v
}

// FS returns m as Go's mode bits, for os.Chmod and friends.
func (m FileMode) FS() fs.FileMode {
	v := fs.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		v |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		v |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		v |= fs.ModeSticky
	}
	return v
}

// Perm is the permission bits alone (no setuid, setgid or sticky), as a
// client should apply a mode that came from a sandbox to its own files.
func (m FileMode) Perm() fs.FileMode { return fs.FileMode(m & 0o777) }

// String is the four-digit octal form, "0644".
func (m FileMode) String() string { return fmt.Sprintf("%04o", uint32(m)&0o7777) }

// MarshalText writes m as String does.
func (m FileMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText reads m as ParseFileMode does.
func (m *FileMode) UnmarshalText(b []byte) error {
	v, err := ParseFileMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}
