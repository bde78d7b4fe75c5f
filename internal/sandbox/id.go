package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"regexp"

	"github.com/hotcell/hotcell/internal/errdefs"
)

// idPattern is the one rule for sandbox ids. Ids become container, volume
// and directory names, so they stay short and plain.
var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ValidateID checks a sandbox id taken from a request.
func ValidateID(id string) error {
	if !idPattern.MatchString(id) {
		return errdefs.Invalid("id", "%q is not a sandbox id (lower-case letters, digits and '-', at most 63)", truncate(id, 80))
	}
	return nil
}

// newID returns a fresh id: 12 hex characters, 48 random bits.
func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "sb-" + hex.EncodeToString(b[:])
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
