// Package clientconfig decides where a client finds the daemon and which
// token it sends, and remembers where each came from so that an error can
// say what to fix. The CLI, the MCP server and the Go SDK's FromEnv all
// resolve their settings here. It uses only the standard library.
package clientconfig

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Defaults and the variables a client reads.
const (
	DefaultURL = "http://127.0.0.1:8080"
	// DefaultDataDir is the daemon's data directory when none is
	// configured, and so where a client looks for the token file.
	DefaultDataDir = "/var/lib/hotcell"

	EnvURL     = "HOTCELL_URL"
	EnvToken   = "HOTCELL_TOKEN"
	EnvDataDir = "HOTCELL_DATA_DIR"
)

// Sources of a setting besides a token file's path.
const (
	SourceFlagURL   = "--url"
	SourceFlagToken = "--token"
	SourceDefault   = "default"
)

// maxTokenFile bounds how much of a token file is read; a token is ~70 bytes.
const maxTokenFile = 4 << 10

// Flags are the settings given on a command line; empty means not given.
type Flags struct {
	URL, Token string
}

// Settings are a client's resolved settings and where each came from.
type Settings struct {
	URL string
	// URLSource is SourceFlagURL, EnvURL or SourceDefault.
	URLSource string
	Token     string
	// TokenSource is SourceFlagToken, EnvToken or the token file's path.
	TokenSource string
}

// Resolve finds the URL (flag, then $HOTCELL_URL, then DefaultURL) and the
// token (flag, then $HOTCELL_TOKEN, then the token file, see TokenPath).
// When no token can be had, the error says why and what to set, and the
// returned Settings still hold the URL. getenv may be nil for os.Getenv.
func Resolve(flags Flags, getenv func(string) string) (Settings, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var s Settings
	switch {
	case flags.URL != "":
		s.URL, s.URLSource = flags.URL, SourceFlagURL
	case getenv(EnvURL) != "":
		s.URL, s.URLSource = getenv(EnvURL), EnvURL
	default:
		s.URL, s.URLSource = DefaultURL, SourceDefault
	}
	if t := strings.TrimSpace(flags.Token); t != "" {
		s.Token, s.TokenSource = t, SourceFlagToken
		return s, nil
	}
	if t := strings.TrimSpace(getenv(EnvToken)); t != "" {
		s.Token, s.TokenSource = t, EnvToken
		return s, nil
	}
	path := TokenPath(getenv)
	s.TokenSource = path
	t, err := ReadTokenFile(path, nil)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return s, fmt.Errorf("no API token: %s is not set and %s does not exist (is the daemon running with --data-dir %s?)", EnvToken, path, filepath.Dir(path))
	case errors.Is(err, fs.ErrPermission):
		return s, fmt.Errorf("no API token: %s is not set and %s is not readable by this user (set %s, or run as a user that can read it): %w", EnvToken, path, EnvToken, err)
	case err != nil:
		return s, fmt.Errorf("no API token: %s is not set: %w", EnvToken, err)
	}
	s.Token = t
	return s, nil
}

// TokenHint names what to check when the daemon refuses the token.
func (s Settings) TokenHint() string {
	switch s.TokenSource {
	case SourceFlagToken, EnvToken:
		return s.TokenSource
	}
	return EnvToken + " or " + s.TokenSource
}

// URLHint names what to set or check when the daemon cannot be reached.
func (s Settings) URLHint() string {
	switch s.URLSource {
	case SourceFlagURL, EnvURL:
		return "check " + s.URLSource
	}
	return "set --url or " + EnvURL
}

// TokenPath is the token file a client reads when no token is given:
// $HOTCELL_DATA_DIR/token, or DefaultDataDir/token. getenv may be nil.
func TokenPath(getenv func(string) string) string {
	if getenv == nil {
		getenv = os.Getenv
	}
	dir := getenv(EnvDataDir)
	if dir == "" {
		dir = DefaultDataDir
	}
	return filepath.Join(dir, "token")
}

// ReadTokenFile reads the token file at path as the daemon writes it: the
// token, perhaps with a newline. check, if not nil, vets the opened file
// (the daemon refuses one that others may read). A missing file wraps
// fs.ErrNotExist.
func ReadTokenFile(path string, check func(path string, fi fs.FileInfo) error) (string, error) {
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
	if check != nil {
		if err := check(path, fi); err != nil {
			return "", err
		}
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
