package config

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// TokenEnv is the variable clients read the API token from first.
const TokenEnv = "HOTCELL_TOKEN"

// tokenPrefix makes a hotcell token recognisable (e.g. to secret scanners).
const tokenPrefix = "hc_"

// maxTokenFile bounds how much of a token file is read; a token is ~70 bytes.
const maxTokenFile = 4 << 10

// EnsureToken returns the daemon's API token stored at path, generating and
// writing a new one (created is true) if the file does not exist. The parent
// directory is created 0700 if missing. An existing file that group or
// others can access is refused: the token may already have leaked.
func EnsureToken(path string) (token string, created bool, err error) {
	token, err = readToken(path, true)
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
			token, err := readToken(path, true)
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

// ReadClientToken returns the token a client sends: HOTCELL_TOKEN if set,
// else the token file in dataDir (HOTCELL_DATA_DIR, then the default data
// dir, when dataDir is empty). getenv may be nil.
func ReadClientToken(getenv func(string) string, dataDir string) (string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if t := strings.TrimSpace(getenv(TokenEnv)); t != "" {
		return t, nil
	}
	if dataDir == "" {
		dataDir = getenv("HOTCELL_DATA_DIR")
	}
	if dataDir == "" {
		dataDir = DefaultDataDir
	}
	path := filepath.Join(dataDir, "token")
	// The daemon enforces the file's mode; a client only needs the value.
	t, err := readToken(path, false)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("no API token: %s is not set and %s does not exist (is the daemon running with --data-dir %s?)", TokenEnv, path, dataDir)
	case errors.Is(err, fs.ErrPermission):
		return "", fmt.Errorf("no API token: %s is not set and %s is not readable by this user (set %s, or run as a user that can read it): %w", TokenEnv, path, TokenEnv, err)
	case err != nil:
		return "", fmt.Errorf("no API token: %s is not set: %w", TokenEnv, err)
	}
	return t, nil
}

// readToken reads and trims the token at path. With strict, a file that
// group or others may access is refused. A missing file wraps fs.ErrNotExist.
func readToken(path string, strict bool) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	defer f.Close()
	// Stat the open file, not the path, so the checked file is the read one.
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("read token %s: not a regular file", path)
	}
	if perm := fi.Mode().Perm(); strict && perm&0o077 != 0 {
		return "", fmt.Errorf("read token %s: mode %04o lets group or others read it; run `chmod 600 %s` (and consider replacing the token)", path, perm, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return "", fmt.Errorf("read token %s: %w", path, err)
	}
	if len(data) > maxTokenFile {
		return "", fmt.Errorf("read token %s: file is larger than %d bytes", path, maxTokenFile)
	}
	t := strings.TrimSpace(string(data))
	if t == "" {
		return "", fmt.Errorf("read token %s: file is empty; delete it to have the daemon generate a new token", path)
	}
	return t, nil
}
