// E2B's code interpreter through the real @e2b/code-interpreter SDK
// (pinned in package.json), against hotcell/code (run by
// TestE2BCodeInterpreter in test/e2e/code_e2b_test.go).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

let sbx
before(async () => {
  // No template: the SDK's default, code-interpreter-v1, is hotcell/code.
  sbx = await Sandbox.create({ timeoutMs: 300_000 })
})
after(async () => {
  if (sbx) await sbx.kill()
})

test('the default template is hotcell/code', async () => {
  const r = await fetch(`${process.env.HOTCELL_URL}/v1/sandboxes/${sbx.sandboxId}`, {
    headers: { Authorization: `Bearer ${process.env.HOTCELL_TOKEN}` },
  })
  assert.equal((await r.json()).image, 'hotcell/code:latest')
})

test('runCode: state, text, logs and the execution count', async () => {
  await sbx.runCode('x = 40')
  const out = []
  const e = await sbx.runCode('print("hello")\nx + 2', { onStdout: (m) => out.push(m.line) })
  assert.equal(e.text, '42')
  assert.deepEqual(e.logs.stdout, ['hello\n'])
  assert.deepEqual(out, ['hello\n'])
  assert.equal(e.error, undefined)
  assert.ok(e.executionCount >= 2, `executionCount ${e.executionCount}`)
})

test('runCode: a DataFrame has html, a figure a png', async () => {
  const df = await sbx.runCode("import pandas as pd\npd.DataFrame({'a': [1, 2]})")
  assert.ok(df.results[0].html.includes('<table'), df.results[0].html)
  assert.ok(df.results[0].isMainResult)
  const fig = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()')
  const png = fig.results.find((r) => r.png)
  assert.ok(png, `no png in ${JSON.stringify(fig.results.map((r) => r.formats()))}`)
  assert.ok(png.formats().includes('png'))
  const bytes = Buffer.from(png.png, 'base64')
  assert.equal(bytes.subarray(1, 4).toString(), 'PNG')
})

test('runCode: errors', async () => {
  const errs = []
  const e = await sbx.runCode('raise ValueError("nope")', { onError: (err) => errs.push(err) })
  assert.ok(e.error, `no error in ${JSON.stringify(e)}`)
  assert.equal(e.error.name, 'ValueError')
  assert.equal(e.error.value, 'nope')
  assert.ok(e.error.traceback.includes('ValueError'))
  assert.equal(errs.length, 1)
})

test('runCode: env vars and other languages', async () => {
  const e = await sbx.runCode('import os\nos.environ["ONLY_NOW"]', { envs: { ONLY_NOW: 'yes' } })
  assert.equal(e.text, "'yes'")
  const js = await sbx.runCode('const k = 6; k * 7', { language: 'javascript' })
  assert.equal(js.text, '42')
  const sh = await sbx.runCode('echo "$((6 * 7))"', { language: 'bash' })
  assert.deepEqual(sh.logs.stdout.join(''), '42\n')
})

test('contexts: create, list, isolate, restart, remove', async () => {
  const a = await sbx.createCodeContext({ language: 'python', cwd: '/tmp' })
  const b = await sbx.createCodeContext()
  assert.equal(a.cwd, '/tmp')
  assert.equal(a.language, 'python')
  await sbx.runCode('mine = "a"', { context: a })
  const cwd = await sbx.runCode('import os\nos.getcwd()', { context: a })
  assert.equal(cwd.text, "'/tmp'")
  const other = await sbx.runCode('mine', { context: b })
  assert.equal(other.error.name, 'NameError')
  const ids = (await sbx.listCodeContexts()).map((c) => c.id)
  assert.ok(ids.includes(a.id) && ids.includes(b.id), JSON.stringify(ids))
  await sbx.restartCodeContext(a)
  assert.equal((await sbx.runCode('mine', { context: a })).error.name, 'NameError')
  await sbx.removeCodeContext(b.id)
  assert.ok(!(await sbx.listCodeContexts()).map((c) => c.id).includes(b.id))
  // requestTimeoutMs 0: the SDK clears its request timer only on success,
  // and a pending 60 s timer would hold node after the tests.
  await assert.rejects(sbx.runCode('1', { context: b, requestTimeoutMs: 0 }), /not found/)
})
