// envd's process service through the real e2b SDK: pty.* (run by
// TestE2BPty in test/e2e/e2b_process_test.go).
import { test, before } from 'node:test'
import assert from 'node:assert/strict'
import { testSandbox, eventually } from './sandbox.mjs'

let sbx
before(async () => {
  sbx = await testSandbox()
})

test('pty: create, sendInput, resize, kill', async () => {
  let out = ''
  const dec = new TextDecoder()
  const h = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d, { stream: true }) } })
  assert.ok(h.pid > 0)
  const enc = new TextEncoder()
  await sbx.pty.sendInput(h.pid, enc.encode('stty size; echo "[$TERM] $(whoami)"\n'))
  await eventually(() => out.includes('24 80') && out.includes('[xterm-256color] user'), `the size and TERM in ${JSON.stringify(out)}`)
  await sbx.pty.resize(h.pid, { cols: 100, rows: 30 })
  await sbx.pty.sendInput(h.pid, enc.encode('stty size\n'))
  await eventually(() => out.includes('30 100'), `the new size in ${JSON.stringify(out)}`)
  assert.equal(await sbx.pty.kill(h.pid), true)
  await assert.rejects(h.wait())
  assert.equal(await sbx.pty.kill(h.pid), false)
})

test('pty: exit of the shell ends the stream', async () => {
  let out = ''
  const dec = new TextDecoder()
  const h = await sbx.pty.create({ cols: 80, rows: 24, user: 'root', onData: (d) => { out += dec.decode(d, { stream: true }) } })
  await sbx.pty.sendInput(h.pid, new TextEncoder().encode('whoami; exit 0\n'))
  const r = await h.wait()
  assert.equal(r.exitCode, 0)
  assert.match(out, /root/)
})
