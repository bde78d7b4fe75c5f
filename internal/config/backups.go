package config

import (
	"path/filepath"
	"time"
)

// Shipped backup limits: sized for a small host, where one sandbox's
// backups must not be able to fill the disk that holds the store. A
// workspace tar is at most the default disk limit (10 GiB); a sandbox keeps
// at most two such backups' worth.
const (
	DefaultBackupMaxSize     = 10 << 30
	DefaultBackupQuota       = 20 << 30
	DefaultMinFreeDisk       = 1 << 30
	DefaultBackupIdleTimeout = 2 * time.Minute
)

// validateBackups checks the backup limits and directory.
func (c *Config) validateBackups(bad func(key string, value any, format string, args ...any) error) error {
	for _, b := range []struct {
		key string
		v   int64
	}{{"backup_max_size", c.BackupMaxSize}, {"backup_quota", c.BackupQuota}, {"min_free_disk", c.MinFreeDisk}} {
		if b.v < 0 {
			return bad(b.key, b.v, "must not be negative (0 turns it off)")
		}
	}
	if c.BackupIdleTimeout <= 0 {
		return bad("backup_idle_timeout", c.BackupIdleTimeout, "must be greater than 0")
	}
	if c.BackupDir != "" && (!filepath.IsAbs(c.BackupDir) || filepath.Clean(c.BackupDir) == "/") {
		return bad("backup_dir", c.BackupDir, "must be an absolute directory other than /, or empty for data_dir/backups")
	}
	if c.BackupDir != "" {
		c.BackupDir = filepath.Clean(c.BackupDir)
	}
	return nil
}
