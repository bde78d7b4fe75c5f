package e2e

import (
	"testing"

	"github.com/hotcell/hotcell/internal/testenv"
)

// TestE2BCodeInterpreter runs the real @e2b/code-interpreter SDK against
// hotcell/code (test/e2e/e2b/code_interpreter.test.mjs): runCode with its
// results, logs and errors, and createCodeContext, listCodeContexts,
// restartCodeContext and removeCodeContext, through the E2B routes.
func TestE2BCodeInterpreter(t *testing.T) {
	t.Parallel()
	testenv.CodeImage(t)
	runE2BNode(t, "code_interpreter.test.mjs")
}
