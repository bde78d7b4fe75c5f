// example.mjs — node example.mjs
import { Sandbox } from 'e2b'

const sbx = await Sandbox.create({ timeoutMs: 120_000, metadata: { job: 'demo' } })
const r = await sbx.commands.run('echo "hello from $(hostname)"; uname -r')
console.log(r.stdout)
await sbx.files.write('/tmp/hi.txt', 'hi')
console.log(await sbx.files.read('/tmp/hi.txt'))
console.log((await Sandbox.list({ query: { metadata: { job: 'demo' } } }).nextItems()).map((s) => s.sandboxId))
await sbx.kill()
