// The E2B control plane through the real e2b SDK (run by TestE2BControl in
// test/e2e/e2b_control_test.go, which sets E2B_API_URL, E2B_SANDBOX_URL,
// E2B_API_KEY and E2B_TEMPLATE).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, AuthenticationError } from 'e2b'

test('the daemon answers envd health at E2B_SANDBOX_URL', async () => {
  const res = await fetch(process.env.E2B_SANDBOX_URL + '/health')
  assert.equal(res.status, 204)
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
