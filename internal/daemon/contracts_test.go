package daemon

import (
	"reflect"
	"testing"

	"github.com/hotcell/hotcell/internal/api"
	"github.com/hotcell/hotcell/internal/sandbox"
)

// TestManagerServesEveryContract fails when api.Options grows a field the
// sandbox manager could serve but the daemon does not wire: such a feature
// would answer 501 (or, for activity, let the reaper stop busy sandboxes).
func TestManagerServesEveryContract(t *testing.T) {
	t.Parallel()
	mgr := sandbox.New(nil, nil, sandbox.Options{})
	o := withManager(api.Options{}, mgr)
	v := reflect.ValueOf(o)
	mt := reflect.TypeOf(mgr)
	wired := 0
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.Type.Kind() != reflect.Interface || !mt.Implements(f.Type) {
			continue
		}
		if v.Field(i).IsNil() {
			t.Errorf("api.Options.%s (%s): the sandbox manager implements it but withManager leaves it nil", f.Name, f.Type)
		}
		wired++
	}
	if wired < 6 {
		t.Errorf("got %d manager contracts in api.Options, want at least 6 (Manager, Lifecycle, Activity, Egress, Ports, GatewayAccess)", wired)
	}
}
