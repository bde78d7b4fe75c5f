// The E2B filesystem (filesystem.Filesystem and /files) through the real
// e2b SDK (run by TestE2BFiles in test/e2e/e2b_files_test.go, which sets
// E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY, E2B_TEMPLATE, HOTCELL_URL and
// HOTCELL_TOKEN).
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { gzipSync } from 'node:zlib'
import { Sandbox, FileNotFoundError, InvalidArgumentError, AuthenticationError } from 'e2b'

// The envd version hotcell reports (e2b.EnvdVersion): file metadata and
// watch entries need 0.6.2 and 0.6.3.
const envdVersion = '0.6.4'
const sandboxFor = (id, token) => new Sandbox({ sandboxId: id, envdAccessToken: token, envdVersion })

const timeoutMs = 120_000
let sbx // the sandbox under test
let other // a second sandbox, whose token must not open the first

// hotcellExec runs a command in a sandbox through hotcell's own API (the
// test's view from the other side, and the way to add the E2B user account
// to an image that lacks it).
async function hotcellExec (id, command) {
  const res = await fetch(`${process.env.HOTCELL_URL}/v1/sandboxes/${id}/exec`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${process.env.HOTCELL_TOKEN}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ command }),
  })
  assert.equal(res.status, 200, await res.clone().text())
  return res.json()
}

// The sandboxes: the ones the Go test made (E2B_TEST_SANDBOX_ID and
// E2B_TEST_OTHER_ID with their envd tokens, no control plane needed), or
// new ones from the control plane.
let created = false
before(async () => {
  if (process.env.E2B_TEST_SANDBOX_ID) {
    sbx = sandboxFor(process.env.E2B_TEST_SANDBOX_ID, process.env.E2B_TEST_ENVD_TOKEN)
    other = sandboxFor(process.env.E2B_TEST_OTHER_ID, process.env.E2B_TEST_OTHER_TOKEN)
  } else {
    sbx = await Sandbox.create(process.env.E2B_TEMPLATE, { timeoutMs: 600_000 })
    other = await Sandbox.create(process.env.E2B_TEMPLATE, { timeoutMs: 600_000 })
    created = true
  }
  // The E2B user (uid 1000, /home/user), for images that lack it.
  const r = await hotcellExec(sbx.sandboxId,
    'id user >/dev/null 2>&1 || { useradd -m -u 1000 -s /bin/bash user 2>/dev/null || adduser -D -u 1000 user; }; id -u user')
  assert.equal(r.stdout.trim(), '1000', JSON.stringify(r))
})

after(async () => {
  if (created) {
    await sbx?.kill()
    await other?.kill()
  }
})

// envdFetch sends a plain HTTP request to envd as a proxy in front of
// hotcell would. With one E2B_SANDBOX_URL for all sandboxes, a URL the SDK
// signs is new URL('/files?...', E2B_SANDBOX_URL): it loses the base URL's
// path (/e2b) and names no sandbox. The per-sandbox host form
// (49983-<id>.<domain>) has both; here the path is put back and the
// sandbox named by the E2b-Sandbox-Id header, as such a proxy would.
function envdFetch (url, init = {}, id = sbx.sandboxId) {
  const u = new URL(url)
  const target = u.pathname === '/files' ? process.env.E2B_SANDBOX_URL + u.pathname + u.search : u.toString()
  return fetch(target, { ...init, headers: { 'E2b-Sandbox-Id': id, ...(init.headers ?? {}) } })
}

test('write and read text; relative paths are in the user\'s home and belong to the user', { timeout: timeoutMs }, async () => {
  const info = await sbx.files.write('notes/hello.txt', 'hello, world\n')
  assert.equal(info.path, '/home/user/notes/hello.txt')
  assert.equal(info.name, 'hello.txt')
  assert.equal(info.type, 'file')
  assert.equal(await sbx.files.read('/home/user/notes/hello.txt'), 'hello, world\n')
  assert.equal(await sbx.files.read('notes/hello.txt'), 'hello, world\n')
  const st = await hotcellExec(sbx.sandboxId, 'stat -c %U:%G:%a /home/user/notes /home/user/notes/hello.txt')
  assert.equal(st.stdout, 'user:user:755\nuser:user:644\n')
  // As root, by name: root's file.
  await sbx.files.write('/tmp/root.txt', 'r', { user: 'root' })
  assert.equal((await sbx.files.getInfo('/tmp/root.txt')).owner, 'root')
  // Full paths, empty files, overwrite.
  await sbx.files.write('/tmp/e2b/deep/er/empty.txt', '')
  assert.equal(await sbx.files.read('/tmp/e2b/deep/er/empty.txt'), '')
  await sbx.files.write('/tmp/e2b/deep/er/empty.txt', 'now full')
  assert.equal(await sbx.files.read('/tmp/e2b/deep/er/empty.txt'), 'now full')
})

test('metadata: kept with the file, returned by write, getInfo and list, kept by a rewrite', { timeout: timeoutMs }, async () => {
  const info = await sbx.files.write('/tmp/meta/a.txt', 'a', { metadata: { Author: 'ann', purpose: 'a test' } })
  assert.deepEqual(info.metadata, { author: 'ann', purpose: 'a test' })
  assert.deepEqual((await sbx.files.getInfo('/tmp/meta/a.txt')).metadata, { author: 'ann', purpose: 'a test' })
  const [streamed] = await sbx.files.write([{ path: '/tmp/meta/b.txt', data: 'b' }], { metadata: { k: 'v' }, gzip: true })
  assert.deepEqual(streamed.metadata, { k: 'v' })
  await sbx.files.write('/tmp/meta/a.txt', 'rewritten')
  const listed = await sbx.files.list('/tmp/meta')
  assert.deepEqual(listed.map(e => [e.name, e.metadata]), [['a.txt', { author: 'ann', purpose: 'a test' }], ['b.txt', { k: 'v' }]])
  assert.equal((await sbx.files.getInfo('/tmp')).metadata, undefined)
})

test('write several files in one multipart upload, full paths kept', { timeout: timeoutMs }, async () => {
  const infos = await sbx.files.write([
    { path: '/tmp/multi/a.txt', data: 'A' },
    { path: '/tmp/multi/sub/b.txt', data: new TextEncoder().encode('B') },
    { path: 'multi-rel/c.txt', data: new Blob(['C']) },
  ])
  assert.deepEqual(infos.map(i => i.path), ['/tmp/multi/a.txt', '/tmp/multi/sub/b.txt', '/home/user/multi-rel/c.txt'])
  assert.equal(await sbx.files.read('/tmp/multi/a.txt'), 'A')
  assert.equal(await sbx.files.read('/tmp/multi/sub/b.txt'), 'B')
  assert.equal(await sbx.files.read('/home/user/multi-rel/c.txt'), 'C')
})

function pattern (n) {
  const b = new Uint8Array(n)
  for (let i = 0; i < n; i++) b[i] = (i * 7 + (i >> 10)) & 0xff
  return b
}

test('write a stream (octet-stream) and read it back as bytes, blob and stream', { timeout: timeoutMs }, async () => {
  const data = pattern(24 << 20)
  let off = 0
  const stream = new ReadableStream({
    pull (c) {
      if (off >= data.length) { c.close(); return }
      c.enqueue(data.subarray(off, off + (1 << 20)))
      off += 1 << 20
    },
  })
  const info = await sbx.files.write('/tmp/big.bin', stream)
  assert.equal(info.path, '/tmp/big.bin')
  const bytes = await sbx.files.read('/tmp/big.bin', { format: 'bytes' })
  assert.equal(bytes.length, data.length)
  assert.ok(Buffer.from(bytes).equals(Buffer.from(data)), 'bytes differ')
  const blob = await sbx.files.read('/tmp/big.bin', { format: 'blob' })
  assert.equal(blob.size, data.length)
  const rs = await sbx.files.read('/tmp/big.bin', { format: 'stream' })
  let n = 0
  for await (const chunk of rs) n += chunk.length
  assert.equal(n, data.length)
  assert.equal((await sbx.files.getInfo('/tmp/big.bin')).size, data.length)
})

test('gzip both ways', { timeout: timeoutMs }, async () => {
  const text = 'compress me '.repeat(10000)
  await sbx.files.write('/tmp/gz.txt', text, { gzip: true })
  assert.equal(await sbx.files.read('/tmp/gz.txt'), text)
  assert.equal(await sbx.files.read('/tmp/gz.txt', { gzip: true }), text)
  // On the wire: a gzip reply when asked, a raw one when not.
  const url = await sbx.downloadUrl('/tmp/gz.txt')
  const zipped = await envdFetch(url, { headers: { 'Accept-Encoding': 'gzip' } })
  assert.equal(zipped.status, 200)
  assert.equal(zipped.headers.get('content-encoding'), 'gzip')
  assert.equal(await zipped.text(), text) // fetch decodes it
  const raw = await envdFetch(url, { headers: { 'Accept-Encoding': 'identity' } })
  assert.equal(raw.headers.get('content-encoding'), null)
  assert.equal(raw.headers.get('content-length'), String(text.length))
  assert.equal(await raw.text(), text)
  // A gzip body the client compressed itself.
  const up = await sbx.uploadUrl('/tmp/gz2.txt')
  const res = await envdFetch(up, { method: 'POST', headers: { 'Content-Type': 'application/octet-stream', 'Content-Encoding': 'gzip' }, body: gzipSync('zipped by hand') })
  assert.equal(res.status, 200, await res.clone().text())
  assert.equal(await sbx.files.read('/tmp/gz2.txt'), 'zipped by hand')
})

test('list with depth, exists, getInfo', { timeout: timeoutMs }, async () => {
  await sbx.files.write([
    { path: '/tmp/tree/a.txt', data: 'a' },
    { path: '/tmp/tree/d1/b.txt', data: 'bb' },
    { path: '/tmp/tree/d1/d2/c.txt', data: 'ccc' },
  ])
  const names = entries => entries.map(e => `${e.path}:${e.type}`).sort()
  assert.deepEqual(names(await sbx.files.list('/tmp/tree')), ['/tmp/tree/a.txt:file', '/tmp/tree/d1:dir'])
  assert.deepEqual(names(await sbx.files.list('/tmp/tree', { depth: 2 })),
    ['/tmp/tree/a.txt:file', '/tmp/tree/d1/b.txt:file', '/tmp/tree/d1/d2:dir', '/tmp/tree/d1:dir'])
  assert.deepEqual(names(await sbx.files.list('/tmp/tree', { depth: 5 })).length, 5)
  await assert.rejects(sbx.files.list('/tmp/tree', { depth: 0 }), InvalidArgumentError)
  await assert.rejects(sbx.files.list('/tmp/tree/a.txt'), InvalidArgumentError)
  await assert.rejects(sbx.files.list('/tmp/no-such-dir'), FileNotFoundError)

  assert.equal(await sbx.files.exists('/tmp/tree/a.txt'), true)
  assert.equal(await sbx.files.exists('/tmp/tree/nope'), false)

  const info = await sbx.files.getInfo('/tmp/tree/d1/b.txt')
  assert.equal(info.name, 'b.txt')
  assert.equal(info.type, 'file')
  assert.equal(info.path, '/tmp/tree/d1/b.txt')
  assert.equal(info.size, 2)
  assert.equal(info.mode, 0o644)
  assert.equal(info.permissions, '-rw-r--r--')
  assert.equal(info.owner, 'user')
  assert.equal(info.group, 'user')
  assert.ok(info.modifiedTime instanceof Date && Math.abs(info.modifiedTime - Date.now()) < 10 * 60_000, String(info.modifiedTime))
  const dir = await sbx.files.getInfo('/tmp/tree/d1')
  assert.equal(dir.type, 'dir')
  assert.equal(dir.permissions, 'drwxr-xr-x')
  await hotcellExec(sbx.sandboxId, 'ln -sfn /tmp/tree/d1 /tmp/tree-link')
  const link = await sbx.files.getInfo('/tmp/tree-link')
  assert.equal(link.type, 'symlink')
  assert.equal(link.symlinkTarget, '/tmp/tree/d1')
  await assert.rejects(sbx.files.getInfo('/tmp/tree/nope'), FileNotFoundError)
})

test('makeDir, rename, remove', { timeout: timeoutMs }, async () => {
  assert.equal(await sbx.files.makeDir('/tmp/made/x/y'), true)
  assert.equal(await sbx.files.makeDir('/tmp/made/x/y'), false)
  assert.equal((await sbx.files.getInfo('/tmp/made/x')).owner, 'user')
  await sbx.files.write('/tmp/made/f.txt', 'f')
  await assert.rejects(sbx.files.makeDir('/tmp/made/f.txt'), InvalidArgumentError)

  const moved = await sbx.files.rename('/tmp/made/f.txt', '/tmp/made/new/place/g.txt')
  assert.equal(moved.path, '/tmp/made/new/place/g.txt')
  assert.equal(moved.name, 'g.txt')
  assert.equal(moved.type, 'file')
  assert.equal(await sbx.files.exists('/tmp/made/f.txt'), false)
  assert.equal(await sbx.files.read('/tmp/made/new/place/g.txt'), 'f')
  await assert.rejects(sbx.files.rename('/tmp/made/none', '/tmp/made/none2'), FileNotFoundError)

  await sbx.files.remove('/tmp/made')
  assert.equal(await sbx.files.exists('/tmp/made'), false)
  await sbx.files.remove('/tmp/made') // gone already: no error
})

function waitFor (events, pred, ms = 10_000) {
  return new Promise((resolve, reject) => {
    const t0 = Date.now()
    const tick = () => {
      const hit = events.find(pred)
      if (hit) return resolve(hit)
      if (Date.now() - t0 > ms) return reject(new Error(`no such event in ${JSON.stringify(events)}`))
      setTimeout(tick, 20)
    }
    tick()
  })
}

test('watchDir: events with relative names, recursive, stop', { timeout: timeoutMs }, async () => {
  await sbx.files.makeDir('/tmp/watched/sub')
  const events = []
  const handle = await sbx.files.watchDir('/tmp/watched', e => events.push(e), { recursive: true })
  await sbx.files.write('/tmp/watched/top.txt', 'x')
  await waitFor(events, e => e.name === 'top.txt' && e.type === 'create')
  await waitFor(events, e => e.name === 'top.txt' && e.type === 'write')
  await sbx.files.write('/tmp/watched/sub/deep.txt', 'y')
  await waitFor(events, e => e.name === 'sub/deep.txt' && e.type === 'create')
  await hotcellExec(sbx.sandboxId, 'chmod 600 /tmp/watched/sub/deep.txt')
  await waitFor(events, e => e.name === 'sub/deep.txt' && e.type === 'chmod')
  await sbx.files.rename('/tmp/watched/top.txt', '/tmp/watched/renamed.txt')
  await waitFor(events, e => e.name === 'top.txt' && e.type === 'rename')
  await waitFor(events, e => e.name === 'renamed.txt' && e.type === 'create')
  await sbx.files.remove('/tmp/watched/renamed.txt')
  await waitFor(events, e => e.name === 'renamed.txt' && e.type === 'remove')
  await handle.stop()
  const seen = events.length
  await sbx.files.write('/tmp/watched/after-stop.txt', 'z')
  await new Promise(resolve => setTimeout(resolve, 500))
  assert.equal(events.length, seen, 'events after stop')

  // Not recursive: nothing from below.
  const flat = []
  const h2 = await sbx.files.watchDir('/tmp/watched', e => flat.push(e))
  await sbx.files.write('/tmp/watched/sub/ignored.txt', 'i')
  await sbx.files.write('/tmp/watched/seen.txt', 's')
  await waitFor(flat, e => e.name === 'seen.txt')
  assert.equal(flat.some(e => e.name.startsWith('sub/')), false, JSON.stringify(flat))
  await h2.stop()

  // With the entry of each event's path.
  const withEntry = []
  const h3 = await sbx.files.watchDir('/tmp/watched', e => withEntry.push(e), { includeEntry: true })
  await sbx.files.write('/tmp/watched/entry.txt', 'entry!')
  const ev = await waitFor(withEntry, e => e.name === 'entry.txt' && e.type === 'write')
  assert.equal(ev.entry?.path, '/tmp/watched/entry.txt', JSON.stringify(ev))
  assert.equal(ev.entry.size, 6)
  await h3.stop()

  await assert.rejects(sbx.files.watchDir('/tmp/no-such-dir', () => {}), FileNotFoundError)
  await assert.rejects(sbx.files.watchDir('/tmp/watched/seen.txt', () => {}), InvalidArgumentError)
})

test('signed uploadUrl and downloadUrl with plain HTTP', { timeout: timeoutMs }, async () => {
  const up = await sbx.uploadUrl('/tmp/signed/up.txt')
  assert.match(up, /signature=v1_/)
  const form = new FormData()
  form.append('file', new Blob(['signed upload']), '/tmp/signed/up.txt')
  let res = await envdFetch(up, { method: 'POST', body: form })
  assert.equal(res.status, 200, await res.clone().text())
  assert.deepEqual(await res.json(), [{ path: '/tmp/signed/up.txt', name: 'up.txt', type: 'file' }])

  const down = await sbx.downloadUrl('/tmp/signed/up.txt', { useSignatureExpiration: 60 })
  assert.match(down, /signature_expiration=\d+/)
  res = await envdFetch(down)
  assert.equal(res.status, 200)
  assert.equal(await res.text(), 'signed upload')

  // Refused: a tampered signature, a read URL used to write, another
  // path, another sandbox, no signature at all.
  const bad = new URL(down)
  const sig = bad.searchParams.get('signature')
  bad.searchParams.set('signature', sig.slice(0, -2) + (sig.endsWith('AA') ? 'BB' : 'AA'))
  res = await envdFetch(bad)
  assert.equal(res.status, 401)
  assert.equal((await res.json()).code, 401)
  const readAsWrite = new URL(await sbx.downloadUrl('/tmp/signed/up.txt'))
  res = await envdFetch(readAsWrite, { method: 'POST', headers: { 'Content-Type': 'application/octet-stream' }, body: 'overwrite' })
  assert.equal(res.status, 401)
  const otherPath = new URL(down)
  otherPath.searchParams.set('path', '/etc/shadow')
  res = await envdFetch(otherPath)
  assert.equal(res.status, 401)
  res = await envdFetch(down, {}, other.sandboxId)
  assert.equal(res.status, 401)
  const unsigned = new URL(down)
  unsigned.searchParams.delete('signature')
  unsigned.searchParams.delete('signature_expiration')
  res = await envdFetch(unsigned)
  assert.equal(res.status, 401)
  assert.equal(await sbx.files.read('/tmp/signed/up.txt'), 'signed upload')

  // A missing file through a signed URL: 404 in E2B's shape.
  res = await envdFetch(await sbx.downloadUrl('/tmp/signed/none.txt'))
  assert.equal(res.status, 404)
  assert.equal((await res.json()).code, 404)
})

test('errors: missing file, unknown user, another sandbox\'s token', { timeout: timeoutMs }, async () => {
  await assert.rejects(sbx.files.read('/tmp/definitely-missing.txt'), FileNotFoundError)
  await assert.rejects(sbx.files.read('/tmp'), InvalidArgumentError)
  await assert.rejects(sbx.files.read('/tmp/a.txt', { user: 'no-such-user' }), InvalidArgumentError)
  await assert.rejects(sbx.files.list('/tmp', { user: 'no-such-user' }), InvalidArgumentError)

  const base = process.env.E2B_SANDBOX_URL
  const otherToken = other.envdAccessToken
  assert.ok(otherToken && otherToken !== sbx.envdAccessToken)
  let res = await envdFetch(`${base}/files?path=/tmp/root.txt`, { headers: { 'X-Access-Token': otherToken } })
  assert.equal(res.status, 401)
  res = await envdFetch(`${base}/filesystem.Filesystem/Stat`, {
    method: 'POST',
    headers: { 'X-Access-Token': otherToken, 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1' },
    body: JSON.stringify({ path: '/tmp/root.txt' }),
  })
  assert.equal(res.status, 401)
  assert.equal((await res.json()).code, 'unauthenticated')
  // The SDK holding this sandbox's id with the other's token.
  const impostor = sandboxFor(sbx.sandboxId, otherToken)
  await assert.rejects(impostor.files.read('/tmp/root.txt'), AuthenticationError)
  await assert.rejects(impostor.files.write('/tmp/x.txt', 'x'), AuthenticationError)
  await assert.rejects(impostor.files.list('/tmp'), AuthenticationError)
  await assert.rejects(impostor.files.watchDir('/tmp', () => {}), AuthenticationError)
  res = await envdFetch(`${base}/files?path=/tmp/x.txt`, { method: 'POST', headers: { 'X-Access-Token': otherToken, 'Content-Type': 'application/octet-stream' }, body: 'x' })
  assert.equal(res.status, 401)
  assert.equal(await sbx.files.exists('/tmp/x.txt'), false)
})
