// Sandbox.create(<a hotcell template's name>) through the real e2b SDK
// (run by TestE2BTemplate in test/e2e/e2b_template_test.go, which builds
// the template E2B_HOTCELL_TEMPLATE: hotcell/base plus /opt/e2b-tpl.txt and
// the env defaults TPL_ENV=from-template, KEEP=tpl, and saves one from a
// sandbox as E2B_SAVED_TEMPLATE, whose /workspace holds seed.txt).
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, Template } from 'e2b'

const made = []
after(async () => {
  for (const id of made) await Sandbox.kill(id).catch(() => {})
})

async function hotcell(id) {
  const res = await fetch(`${process.env.HOTCELL_URL}/v1/sandboxes/${id}`, {
    headers: { Authorization: `Bearer ${process.env.HOTCELL_TOKEN}` },
  })
  assert.equal(res.status, 200)
  return res.json()
}

test('a hotcell template by name: its image, its env under envs, its version recorded', async () => {
  const name = process.env.E2B_HOTCELL_TEMPLATE
  const sbx = await Sandbox.create(name, { envs: { KEEP: 'req' }, timeoutMs: 120_000 })
  made.push(sbx.sandboxId)
  const r = await sbx.commands.run('cat /opt/e2b-tpl.txt; echo "$TPL_ENV $KEEP"')
  assert.equal(r.stdout, 'from-e2b-template\nfrom-template req\n')
  const info = await sbx.getInfo()
  assert.equal(info.templateId, name)
  const hc = await hotcell(sbx.sandboxId)
  assert.deepEqual(hc.template, { name, version: 1 })
  const listed = await Sandbox.list().nextItems()
  assert.ok(listed.some((s) => s.sandboxId === sbx.sandboxId && s.templateId === name))
})

test('a template saved from a sandbox: its workspace seed', async () => {
  const sbx = await Sandbox.create(process.env.E2B_SAVED_TEMPLATE, { timeoutMs: 120_000 })
  made.push(sbx.sandboxId)
  assert.equal(await sbx.files.read('/workspace/seed.txt'), 'seeded\n')
})

test('an image name still means that image', async () => {
  const sbx = await Sandbox.create(process.env.E2B_TEMPLATE, { timeoutMs: 120_000 })
  made.push(sbx.sandboxId)
  const hc = await hotcell(sbx.sandboxId)
  assert.equal(hc.template, undefined)
  assert.equal(hc.image, process.env.E2B_TEMPLATE)
})

test('Template.exists: hotcell templates and base exist, other names do not', async () => {
  assert.equal(await Template.exists(process.env.E2B_HOTCELL_TEMPLATE), true)
  assert.equal(await Template.exists(process.env.E2B_SAVED_TEMPLATE), true)
  assert.equal(await Template.exists('base'), true)
  assert.equal(await Template.exists('no-such-template-e2e'), false)
})
