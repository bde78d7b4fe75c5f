// Package labels checks sandbox labels, the one rule shared by hotcell's
// API (labels) and the E2B API (metadata, stored as labels).
package labels

import (
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/hotcell/hotcell/internal/errdefs"
)

const (
	// Max is how many labels a sandbox may have.
	Max = 64
	// MaxValue is the longest label value, in bytes.
	MaxValue = 256
)

var keyPattern = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._/-]{0,61}[A-Za-z0-9])?$`)

// Validate checks a set of labels; errors name field.key.
func Validate(field string, labels map[string]string) error {
	if len(labels) > Max {
		return errdefs.Invalid(field, "at most %d labels", Max)
	}
	for k, v := range labels {
		if err := ValidateOne(field, k, v); err != nil {
			return err
		}
	}
	return nil
}

// ValidateOne checks one label.
func ValidateOne(field, k, v string) error {
	if !keyPattern.MatchString(k) {
		return errdefs.Invalid(field+"."+clip(k), "not a valid label key (1-63 of letters, digits, '.', '_', '-', '/', starting and ending with a letter or digit)")
	}
	if len(v) > MaxValue || !utf8.ValidString(v) || strings.ContainsFunc(v, isControl) {
		return errdefs.Invalid(field+"."+k, "value must be printable UTF-8 of at most %d bytes", MaxValue)
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
