// commands.connect after a hotcell daemon restart (run in two phases by
// TestE2BCommandsConnectAfterRestart in test/e2e/e2b_process_test.go).
import { test, before } from 'node:test'
import assert from 'node:assert/strict'
import { testSandbox, eventually } from './sandbox.mjs'

let sbx
before(async () => {
  sbx = await testSandbox()
})

if (process.env.PHASE === 'start') {
  test('start a background command', async () => {
    const h = await sbx.commands.run('cat', { background: true, stdin: true, timeoutMs: 0 })
    await sbx.commands.sendStdin(h.pid, 'before\n')
    await eventually(() => h.stdout === 'before\n', 'the echo')
    console.log(`PID=${h.pid}`)
    await h.disconnect()
  })
} else {
  test('connect to it after the daemon restarted', async () => {
    const pid = Number(process.env.E2B_TEST_PID)
    assert.ok((await sbx.commands.list()).some((p) => p.pid === pid), 'the process is still listed')
    let seen = ''
    const h = await sbx.commands.connect(pid, { onStdout: (d) => { seen += d } })
    await sbx.commands.sendStdin(pid, 'after\n')
    await eventually(() => seen === 'after\n', `the echo after the restart (got ${JSON.stringify(seen)})`)
    await sbx.commands.closeStdin(pid)
    const r = await h.wait()
    assert.equal(r.exitCode, 0)
  })
}
