package config

import "time"

// validateLifecycle checks the timeout defaults and reconciler settings.
func (c *Config) validateLifecycle(bad func(key string, value any, format string, args ...any) error) error {
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"idle_timeout", c.IdleTimeout}, {"max_lifetime", c.MaxLifetime}, {"orphan_grace", c.OrphanGrace}} {
		if d.v < 0 {
			return bad(d.key, d.v, "must not be negative (0 turns it off)")
		}
	}
	for _, a := range []struct{ key, v string }{{"idle_action", c.IdleAction}, {"lifetime_action", c.LifetimeAction}} {
		switch a.v {
		case "stop", "pause", "destroy":
		default:
			return bad(a.key, a.v, "must be stop, pause or destroy")
		}
	}
	if c.EngineRestart != "restart" && c.EngineRestart != "mark" {
		return bad("engine_restart_policy", c.EngineRestart, "must be restart or mark")
	}
	return nil
}
