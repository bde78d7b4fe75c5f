// How the process tests get their sandbox: the one the Go test made for
// them (E2B_TEST_SANDBOX_ID and its envd token E2B_TEST_ENVD_TOKEN), or,
// without those, a new one from the control plane.
import { Sandbox } from 'e2b'

export const envdVersion = '0.5.7'

export function sandboxFor(id, token) {
  return new Sandbox({ sandboxId: id, envdAccessToken: token, envdVersion })
}

export async function testSandbox() {
  const id = process.env.E2B_TEST_SANDBOX_ID
  if (id) return sandboxFor(id, process.env.E2B_TEST_ENVD_TOKEN)
  return Sandbox.create(process.env.E2B_TEMPLATE)
}

// eventually polls cond until it holds (30 s at most: CI hosts are loaded).
export async function eventually(cond, what) {
  for (let i = 0; i < 600; i++) {
    if (await cond()) return
    await new Promise((r) => setTimeout(r, 50))
  }
  throw new Error('timed out waiting for ' + what)
}
