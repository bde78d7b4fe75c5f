// The E2B control plane through the real e2b SDK (run by TestE2BControl in
// test/e2e/e2b_control_test.go, which sets E2B_API_URL, E2B_SANDBOX_URL,
// E2B_API_KEY, E2B_TEMPLATE, HOTCELL_URL and HOTCELL_TOKEN).
//
// The sandboxes here use the template "base", the daemon's default image:
// nothing runs in them, so the smallest image does.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import http from 'node:http'
import { Sandbox, AuthenticationError, SandboxNotFoundError } from 'e2b'

const run = randomUUID().slice(0, 8) // this run's sandboxes carry metadata run=<run>
// E2B_TEST_NO_PAUSE: the daemon's driver cannot pause (Kubernetes; run by
// TestKubernetesE2BSDK in test/k8se2e): a pause is refused, saying so.
const noPause = !!process.env.E2B_TEST_NO_PAUSE
const made = []

after(async () => {
  for (const id of made) await Sandbox.kill(id).catch(() => {})
})

async function create(opts = {}) {
  const sbx = await Sandbox.create('base', { ...opts, metadata: { run, ...opts.metadata } })
  made.push(sbx.sandboxId)
  return sbx
}

// hotcell's own view of a sandbox, through its own API.
async function hotcell(id) {
  const res = await fetch(`${process.env.HOTCELL_URL}/v1/sandboxes/${id}`, {
    headers: { Authorization: `Bearer ${process.env.HOTCELL_TOKEN}` },
  })
  return { status: res.status, body: res.status === 200 ? await res.json() : await res.text() }
}

const near = (date, ms, slack = 15_000) => {
  const d = date.getTime() - Date.now()
  assert.ok(d > ms - slack && d <= ms + 2_000, `ends in ${d} ms, want about ${ms}`)
}

test('the daemon answers envd health at E2B_SANDBOX_URL', async () => {
  const res = await fetch(process.env.E2B_SANDBOX_URL + '/health')
  assert.equal(res.status, 204)
})

test('the key is one minted by hotcell keys create', () => {
  assert.match(process.env.E2B_API_KEY, /^e2b_[0-9a-f]{40}$/)
  assert.notEqual(process.env.E2B_API_KEY, process.env.HOTCELL_TOKEN)
})

test('no key: AuthenticationError before any request', async () => {
  const key = process.env.E2B_API_KEY
  delete process.env.E2B_API_KEY
  try {
    await assert.rejects(Sandbox.list().nextItems(), AuthenticationError)
  } finally {
    process.env.E2B_API_KEY = key
  }
})

test('a wrong key: AuthenticationError from the daemon', async () => {
  const apiKey = 'e2b_' + '0'.repeat(40)
  await assert.rejects(Sandbox.create('base', { apiKey }), AuthenticationError)
  await assert.rejects(Sandbox.list({ apiKey }).nextItems(), AuthenticationError)
  await assert.rejects(Sandbox.kill('sb-000000000000', { apiKey }), AuthenticationError)
})

test('create with envs, metadata and timeout; getInfo; a hotcell sandbox', async () => {
  const sbx = await create({ envs: { GREETING: 'hi there' }, metadata: { who: 'a b&c=d' }, timeoutMs: 120_000 })
  assert.match(sbx.sandboxId, /^[a-z0-9-]+$/)
  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.equal(info.templateId, 'base')
  assert.equal(info.state, 'running')
  assert.deepEqual(info.metadata, { run, who: 'a b&c=d' })
  assert.equal(info.envdVersion, process.env.E2B_ENVD_VERSION)
  assert.ok(info.cpuCount > 0)
  near(info.endAt, 120_000)
  assert.ok(Math.abs(info.startedAt.getTime() - Date.now()) < 120_000)

  // The same sandbox through hotcell's own API: envs are its env,
  // metadata its labels, the timeout its lifetime.
  const h = await hotcell(sbx.sandboxId)
  assert.equal(h.status, 200, h.body)
  assert.equal(h.body.env.GREETING, 'hi there')
  assert.equal(h.body.labels.who, 'a b&c=d')
  assert.equal(h.body.timeouts.lifetimeAction, 'destroy')
  near(new Date(h.body.timeouts.expiresAt), 120_000)
})

test('setTimeout moves the end, shorter or longer', async () => {
  const sbx = await create({ timeoutMs: 600_000 })
  await sbx.setTimeout(60_000)
  near((await sbx.getInfo()).endAt, 60_000)
  await Sandbox.setTimeout(sbx.sandboxId, 3_600_000)
  near((await Sandbox.getInfo(sbx.sandboxId)).endAt, 3_600_000)
})

test('connect to a running sandbox', async () => {
  const sbx = await create({ timeoutMs: 60_000 })
  const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 300_000 })
  assert.equal(again.sandboxId, sbx.sandboxId)
  assert.equal((await again.getInfo()).state, 'running')
  near((await again.getInfo()).endAt, 300_000)
  assert.equal(await again.connect(), again)
})

test('pause, pause again (false), connect resumes', { skip: noPause && 'the driver cannot pause' }, async () => {
  const sbx = await create()
  assert.equal(await sbx.pause(), true)
  assert.equal(await sbx.pause(), false)
  assert.equal((await sbx.getInfo()).state, 'paused')
  assert.equal((await hotcell(sbx.sandboxId)).body.state, 'paused')
  const paused = await Sandbox.list({ query: { metadata: { run }, state: ['paused'] } }).nextItems()
  assert.deepEqual(paused.map((s) => s.sandboxId), [sbx.sandboxId])

  const resumed = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 90_000 })
  assert.equal(resumed.sandboxId, sbx.sandboxId)
  const info = await resumed.getInfo()
  assert.equal(info.state, 'running')
  near(info.endAt, 90_000)
  assert.equal((await hotcell(sbx.sandboxId)).body.state, 'running')
})

test('pause where the driver cannot: refused, saying so; the sandbox runs on', { skip: !noPause && 'the driver can pause' }, async () => {
  const sbx = await create()
  await assert.rejects(sbx.pause(), /cannot pause/)
  assert.equal((await sbx.getInfo()).state, 'running')
  assert.equal((await hotcell(sbx.sandboxId)).body.state, 'running')
})

test('list with a metadata filter, a page at a time', async () => {
  const group = randomUUID().slice(0, 8)
  const ids = []
  for (let i = 0; i < 3; i++) ids.push((await create({ metadata: { group, 'odd.key/x': 'v w/&=?%+' } })).sandboxId)
  const pager = Sandbox.list({ query: { metadata: { run, group, 'odd.key/x': 'v w/&=?%+' } }, limit: 2 })
  const first = await pager.nextItems()
  assert.equal(first.length, 2)
  assert.equal(pager.hasNext, true)
  const second = await pager.nextItems()
  assert.equal(pager.hasNext, false)
  const seen = [...first, ...second]
  assert.deepEqual(seen.map((s) => s.sandboxId).sort(), [...ids].sort())
  for (const s of seen) {
    assert.equal(s.templateId, 'base')
    assert.equal(s.state, 'running')
    assert.equal(s.metadata.group, group)
    assert.ok(s.startedAt instanceof Date && !isNaN(s.startedAt))
  }
  const none = await Sandbox.list({ query: { metadata: { run, group: 'nobody' } } }).nextItems()
  assert.deepEqual(none, [])
})

test('getMetrics: one sample now of a running sandbox, none of a paused one', async () => {
  const sbx = await create()
  // None until the backend has read the box once: at once on Docker, in
  // a pod's first 10-20 s on Kubernetes (the kubelet's first look).
  let ms = []
  for (let i = 0; i < 120 && ms.length === 0; i++) {
    ms = await sbx.getMetrics()
    if (ms.length === 0) await new Promise((r) => setTimeout(r, 500))
  }
  const [m, ...rest] = ms
  assert.deepEqual(rest, [])
  assert.ok(m.timestamp instanceof Date && Math.abs(m.timestamp.getTime() - Date.now()) < 60_000, String(m.timestamp))
  assert.ok(m.cpuCount >= 1, `cpuCount ${m.cpuCount}`)
  assert.ok(m.cpuUsedPct >= 0, `cpuUsedPct ${m.cpuUsedPct}`)
  assert.ok(m.memUsed > 0 && m.memTotal >= m.memUsed, `mem ${m.memUsed}/${m.memTotal}`)
  assert.ok(m.diskUsed >= 0, `diskUsed ${m.diskUsed}`)
  // A window that ended an hour ago holds no sample; nor does a paused box.
  assert.deepEqual(await Sandbox.getMetrics(sbx.sandboxId, { end: new Date(Date.now() - 3_600_000) }), [])
  if (!noPause) {
    await sbx.pause()
    assert.deepEqual(await sbx.getMetrics(), [])
  }
  await assert.rejects(Sandbox.getMetrics('sb-000000000000'), SandboxNotFoundError)
})

test('kill: true, then false', async () => {
  const sbx = await create()
  assert.equal(await sbx.kill(), true)
  assert.equal(await sbx.kill(), false)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false)
  assert.equal((await hotcell(sbx.sandboxId)).status, 404)
})

test('a missing sandbox', async () => {
  for (const id of ['sb-000000000000', 'no such sandbox']) {
    assert.equal(await Sandbox.kill(id), false)
    await assert.rejects(Sandbox.getInfo(id), SandboxNotFoundError)
    await assert.rejects(Sandbox.connect(id), SandboxNotFoundError)
    await assert.rejects(Sandbox.setTimeout(id, 10_000), SandboxNotFoundError)
  }
})

test('what hotcell cannot do is refused, naming the field', async () => {
  await assert.rejects(create({ volumeMounts: { '/data': 'vol' } }), /volumeMounts/)
  await assert.rejects(create({ network: { denyOut: ['8.8.8.8/32'] } }), /network\.denyOut/)
  await assert.rejects(Sandbox.create('Not An Image!'), /templateID/)
})

// GET http://<host>/ sent to the daemon's own address: getHost's names
// live under the daemon's preview domain, and the tests use no DNS.
function getVia(host, headers = {}) {
  const api = new URL(process.env.E2B_API_URL)
  return new Promise((resolve, reject) => {
    const req = http.get({ host: api.hostname, port: api.port, path: '/', headers: { ...headers, Host: host } }, (res) => {
      let body = ''
      res.on('data', (c) => (body += c))
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('error', reject)
  })
}

test('getHost names a host the preview proxy answers, with no credential', async () => {
  const sbx = await Sandbox.create(process.env.E2B_TEMPLATE, { metadata: { run } })
  made.push(sbx.sandboxId)
  const host = sbx.getHost(8000)
  assert.equal(host, `8000-${sbx.sandboxId}.preview.localhost`)
  await sbx.commands.run('python3 -m http.server 8000 --bind 127.0.0.1', { background: true, cwd: '/tmp', user: 'root' })
  let res
  for (let i = 0; i < 300; i++) {
    res = await getVia(host)
    if (res.status === 200) break
    await new Promise((r) => setTimeout(r, 100))
  }
  assert.equal(res.status, 200, res.body)
  assert.match(res.body, /Directory listing/)

  // Made with allowPublicTraffic: false, its ports need hotcell's preview
  // credentials.
  const priv = await create({ network: { allowPublicTraffic: false } })
  assert.equal((await priv.getInfo()).network.allowPublicTraffic, false)
  assert.equal((await getVia(priv.getHost(8000))).status, 401)
})
