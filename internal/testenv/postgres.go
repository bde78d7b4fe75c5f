package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hotcell/hotcell/internal/redact"
)

// PostgresEnv names the environment variable that holds the URL of a
// PostgreSQL role that may create databases; scripts/test's
// ensure_postgres sets it. Unset, DefaultPostgresURL is tried.
const PostgresEnv = "HOTCELL_TEST_POSTGRES"

// DefaultPostgresURL is where ensure_postgres (scripts/lib.sh) serves the
// test role: Debian's cluster on 127.0.0.1:5432.
const DefaultPostgresURL = "postgres://hotcell_test:hotcell_test@127.0.0.1:5432/postgres?sslmode=disable"

// RequirePostgres returns the URL of a new, empty PostgreSQL database of
// its own for the test, and drops the database (closing whatever is still
// connected to it) when the test ends. Without a PostgreSQL server that
// answers it skips, or fails in CI, with how to get one.
func RequirePostgres(t testing.TB) string {
	t.Helper()
	admin := os.Getenv(PostgresEnv)
	if admin == "" {
		admin = DefaultPostgresURL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		SkipOrFail(t, "needs PostgreSQL at %s (scripts/test starts one with ensure_postgres; or set %s to the URL of a role that may create databases): %v",
			redact.URL(admin), PostgresEnv, err)
		return ""
	}
	defer conn.Close(context.Background())
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	// hc_t_ marks the databases tests make, should a killed run leave one.
	name := "hc_t_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create test database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("drop test database %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		// FORCE ends the test's own connections, but not an autovacuum
		// worker that started on the new database (a superuser's
		// process: SQLSTATE 42501); it ends by itself, so try again.
		for try := 0; ; try++ {
			_, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			var pe *pgconn.PgError
			if err != nil && errors.As(err, &pe) && pe.Code == "42501" && try < 50 && ctx.Err() == nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			if err != nil {
				t.Errorf("drop test database %s: %v", name, err)
			}
			return
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("%s: %v", PostgresEnv, err)
	}
	u.Path = "/" + name
	return u.String()
}
