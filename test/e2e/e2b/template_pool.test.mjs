// Sandbox.create(<a hotcell template with a warm pool>) through the real
// e2b SDK (run by TestE2BTemplatePool in test/e2e/e2b_template_test.go,
// which builds E2B_HOTCELL_TEMPLATE from hotcell/base with the env default
// TPL_ENV=from-template, gives it a pool and checks from hotcell's side that
// the sandbox printed below was claimed from it). The claimed box has the
// create's envs and metadata, over the template's.
import { test, after } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'

const made = []
after(async () => {
  for (const id of made) await Sandbox.kill(id).catch(() => {})
})

test('a create from a pooled template gets its envs and metadata', async () => {
  const sbx = await Sandbox.create(process.env.E2B_HOTCELL_TEMPLATE, {
    envs: { OWNER: 'e2b-pool' },
    metadata: { team: 'red' },
    timeoutMs: 120_000,
  })
  made.push(sbx.sandboxId)
  const r = await sbx.commands.run('echo "$OWNER $TPL_ENV"')
  assert.equal(r.stdout, 'e2b-pool from-template\n')
  const info = await sbx.getInfo()
  assert.equal(info.metadata.team, 'red')
  assert.equal(info.templateId, process.env.E2B_HOTCELL_TEMPLATE)
  // For the Go test, which checks that the pool held this box and
  // counted its claim (the sandbox is gone by then: killed below).
  console.log(`E2B_POOLED_SANDBOX=${sbx.sandboxId}`)
  const res = await fetch(`${process.env.HOTCELL_URL}/v1/sandboxes/${sbx.sandboxId}`, {
    headers: { Authorization: `Bearer ${process.env.HOTCELL_TOKEN}` },
  })
  const hc = await res.json()
  assert.equal(hc.env.OWNER, 'e2b-pool')
  assert.equal(hc.labels.team, 'red')
})
