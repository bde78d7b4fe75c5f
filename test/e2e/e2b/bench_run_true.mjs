// The E2B half of bench/e2b_test.go's BenchmarkE2BRunTrue: N round trips of
// commands.run('true') through the real e2b SDK, after a warm-up; prints
// the samples in ms as JSON on the last line.
import { testSandbox } from './sandbox.mjs'

const n = Number(process.env.BENCH_N ?? 200)
const warmup = Number(process.env.BENCH_WARMUP ?? 5)
const sbx = await testSandbox()
for (let i = 0; i < warmup; i++) await sbx.commands.run('true')
const ms = []
for (let i = 0; i < n; i++) {
  const t0 = performance.now()
  const r = await sbx.commands.run('true')
  ms.push(performance.now() - t0)
  if (r.exitCode !== 0) throw new Error(`exit code ${r.exitCode}`)
}
console.log(JSON.stringify(ms))
