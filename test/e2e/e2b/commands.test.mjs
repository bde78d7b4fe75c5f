// envd's process service through the real e2b SDK: commands.* (run by
// TestE2BCommands in test/e2e/e2b_process_test.go).
import { test, before } from 'node:test'
import assert from 'node:assert/strict'
import { CommandExitError, AuthenticationError } from 'e2b'
import { testSandbox, sandboxFor, eventually } from './sandbox.mjs'

let sbx
before(async () => {
  sbx = await testSandbox()
})

test('run: stdout, stderr and exit code 0', async () => {
  const r = await sbx.commands.run('echo hello; echo oops >&2')
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'hello\n')
  assert.equal(r.stderr, 'oops\n')
})

test('run: a non-zero exit throws CommandExitError', async () => {
  await assert.rejects(sbx.commands.run('echo partial; exit 3'), (err) => {
    assert.ok(err instanceof CommandExitError, `got ${err}`)
    assert.equal(err.exitCode, 3)
    assert.equal(err.stdout, 'partial\n')
    return true
  })
})

test('run: cwd and envs', async () => {
  const r = await sbx.commands.run('pwd; echo "$FOO-$BAR"', { cwd: '/tmp', envs: { FOO: 'foo', BAR: 'b a r' } })
  assert.equal(r.stdout, '/tmp\nfoo-b a r\n')
})

test('run: root, user, and the default user with its home', async () => {
  assert.equal((await sbx.commands.run('whoami', { user: 'root' })).stdout, 'root\n')
  assert.equal((await sbx.commands.run('id -u; whoami', { user: 'user' })).stdout, '1000\nuser\n')
  const r = await sbx.commands.run('whoami; echo "$HOME"; pwd')
  assert.equal(r.stdout, 'user\n/home/user\n/home/user\n')
  assert.equal((await sbx.commands.run('echo "$HOME"; pwd', { user: 'root' })).stdout, '/root\n/root\n')
  // user has a user's rights, not root's.
  await assert.rejects(sbx.commands.run('cat /etc/shadow', { user: 'user' }), CommandExitError)
  await assert.rejects(sbx.commands.run('touch /etc/hotcell-e2b-test'), CommandExitError)
})

test('run: an unknown user is refused', async () => {
  await assert.rejects(sbx.commands.run('true', { user: 'nobody-here' }), /nobody-here/)
})

test('run: the timeout ends the process', async () => {
  await assert.rejects(sbx.commands.run('sleep 30; echo late', { timeoutMs: 1500 }))
  await eventually(async () => !(await sbx.commands.list()).some((p) => p.args.join(' ').includes('sleep 30; echo late')), 'the timed-out process to go')
})

test('run: onStdout and onStderr get the output in order', async () => {
  const out = []
  const err = []
  const r = await sbx.commands.run('for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.05; done', {
    onStdout: (d) => out.push(d),
    onStderr: (d) => err.push(d),
  })
  assert.equal(out.join(''), 'out1\nout2\nout3\n')
  assert.equal(err.join(''), 'err1\nerr2\nerr3\n')
  assert.equal(r.stdout, out.join(''))
  assert.equal(r.stderr, err.join(''))
})

test('run: several MiB of output', async () => {
  const n = 6 * 1024 * 1024
  const r = await sbx.commands.run(`head -c ${n} /dev/zero | tr '\\0' a; echo; echo done >&2`)
  assert.equal(r.stdout.length, n + 1)
  assert.ok(/^a+\n$/.test(r.stdout))
  assert.equal(r.stderr, 'done\n')
})

test('background: list, sendStdin, closeStdin, wait', async () => {
  const h = await sbx.commands.run('cat', { background: true, stdin: true })
  assert.ok(h.pid > 0)
  const listed = (await sbx.commands.list()).find((p) => p.pid === h.pid)
  assert.ok(listed, 'the process is listed')
  assert.equal(listed.cmd, '/bin/bash')
  await sbx.commands.sendStdin(h.pid, 'some input\n')
  await eventually(() => h.stdout === 'some input\n', 'the echo of stdin')
  await h.closeStdin()
  const r = await h.wait()
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'some input\n')
  assert.ok(!(await sbx.commands.list()).some((p) => p.pid === h.pid), 'an ended process is not listed')
})

test('background: kill is true, then false; wait reports the kill', async () => {
  const h = await sbx.commands.run('sleep 60', { background: true })
  assert.equal(await sbx.commands.kill(h.pid), true)
  await assert.rejects(h.wait(), (err) => {
    assert.ok(err instanceof CommandExitError, `got ${err}`)
    assert.match(err.error ?? '', /killed/)
    return true
  })
  assert.equal(await sbx.commands.kill(h.pid), false)
  assert.equal(await h.kill(), false)
})

test('connect: a second stream on a running process', async () => {
  const h = await sbx.commands.run('cat', { background: true, stdin: true })
  const seen = []
  const c = await sbx.commands.connect(h.pid, { onStdout: (d) => seen.push(d) })
  await sbx.commands.sendStdin(h.pid, 'to both\n')
  await eventually(() => seen.join('') === 'to both\n' && h.stdout === 'to both\n', 'output on both streams')
  await sbx.commands.closeStdin(h.pid)
  assert.equal((await c.wait()).exitCode, 0)
  assert.equal((await h.wait()).exitCode, 0)
})

test('errors: a missing sandbox, and another sandbox\'s token', async () => {
  const missing = process.env.E2B_TEST_MISSING_ID
  if (missing) {
    const ghost = sandboxFor(missing, process.env.E2B_TEST_MISSING_TOKEN)
    await assert.rejects(ghost.commands.run('true'), (err) => !(err instanceof AuthenticationError))
    await assert.rejects(ghost.commands.list(), (err) => !(err instanceof AuthenticationError))
  }
  const other = process.env.E2B_TEST_OTHER_TOKEN
  if (other) {
    const wrong = sandboxFor(sbx.sandboxId, other)
    await assert.rejects(wrong.commands.run('true'), AuthenticationError)
    await assert.rejects(wrong.commands.list(), AuthenticationError)
    await assert.rejects(wrong.commands.kill(1), AuthenticationError)
  }
})
