package config

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hotcell/hotcell/internal/clientconfig"
)

// tokenPrefix makes a hotcell token recognisable (e.g. to secret scanners).
const tokenPrefix = "hc_"

// EnsureToken returns the daemon's API token stored at path, generating and
// writing a new one (created is true) if the file does not exist. The parent
// directory is created 0700 if missing. An existing file that group or
// others can access is refused: the token may already have leaked.
func EnsureToken(path string) (token string, created bool, err error) {
	token, err = clientconfig.ReadTokenFile(path, private)
	if err == nil {
		return token, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", false, err
	}

	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", false, fmt.Errorf("create token dir: %w", err)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", false, fmt.Errorf("generate token: %w", err)
	}
	token = tokenPrefix + hex.EncodeToString(b[:])

	// CreateTemp makes the file 0600. Write it fully, then link it into
	// place: unlike rename, link never replaces a token that a concurrent
	// start wrote (and maybe already handed out) in the meantime.
	tmp, err := os.CreateTemp(dir, ".token-*")
	if err != nil {
		return "", false, fmt.Errorf("write token: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(token + "\n"); err != nil {
		tmp.Close()
		return "", false, fmt.Errorf("write token: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", false, fmt.Errorf("write token: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", false, fmt.Errorf("write token: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			token, err := clientconfig.ReadTokenFile(path, private)
			return token, false, err
		}
		return "", false, fmt.Errorf("write token: %w", err)
	}
	syncDir(dir)
	return token, true, nil
}

// syncDir makes a new directory entry durable. Best effort: the token is
// regenerated if it is lost, so a failure here is not worth failing start.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// private refuses a token file that group or others may access: the
// token may already have leaked.
func private(path string, fi fs.FileInfo) error {
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("read token %s: mode %04o lets group or others read it; run `chmod 600 %s` (and consider replacing the token)", path, perm, path)
	}
	return nil
}

// WriteToken replaces the token file at path with token, 0600, by rename:
// a daemon joining a set of daemons takes the set's token.
func WriteToken(path, token string) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".token-*")
	if err != nil {
		return fmt.Errorf("write token: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(token + "\n"); err != nil {
		tmp.Close()
		return fmt.Errorf("write token: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write token: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write token: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write token: %w", err)
	}
	syncDir(dir)
	return nil
}
