package fakedriver_test

import (
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/driver/drivertest"
	"github.com/hotcell/hotcell/internal/driver/fakedriver"
)

// TestConformance holds the fake to the contract the real drivers meet, so
// the sandbox tests that use it assume nothing a real driver does not give.
func TestConformance(t *testing.T) {
	t.Parallel()
	d := fakedriver.New(t)
	drivertest.Run(t, drivertest.Harness{
		Driver: d,
		Spec: func(t *testing.T) driver.Spec {
			b := make([]byte, 6)
			if _, err := rand.Read(b); err != nil {
				t.Fatal(err)
			}
			return driver.Spec{ID: "fake-" + hex.EncodeToString(b), Image: "fake"}
		},
		MissingImage: fakedriver.MissingImagePrefix + "nothing",
	})
}
