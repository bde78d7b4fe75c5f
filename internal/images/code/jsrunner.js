// hotcell code interpreter: a JavaScript context. One Node process holds one
// vm context whose globals persist between cells. Requests arrive as JSON
// lines on stdin; events go out as JSON lines on the pipe whose number is
// in HOTCELL_EVENTS_FD, so that what user code (or a child it spawns)
// writes to fd 1 and 2 cannot corrupt them.
'use strict';
const vm = require('vm');
const util = require('util');
const fs = require('fs');
const readline = require('readline');
const { Console } = require('console');
const { Writable } = require('stream');

const eventsFd = Number(process.env.HOTCELL_EVENTS_FD);
delete process.env.HOTCELL_EVENTS_FD; // not for the cells' children
// Synchronous writes keep events in order with the cell's own progress,
// and none is lost when the process exits.
function emit(ev) {
  const buf = Buffer.from(JSON.stringify(ev) + '\n');
  for (let off = 0; off < buf.length;) {
    try {
      off += fs.writeSync(eventsFd, buf, off);
    } catch (e) {
      if (e.code !== 'EAGAIN') throw e;
    }
  }
}

let current = null; // id of the running cell: output is attributed to it
function streamWriter(name) {
  return new Writable({
    decodeStrings: false,
    write(chunk, enc, cb) {
      const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
      emit({ id: current, type: name, text });
      cb();
    },
  });
}
const stdoutW = streamWriter('stdout');
const stderrW = streamWriter('stderr');
// process.stdout.write of a cell is output of the cell, like console.log.
for (const [s, w] of [[process.stdout, stdoutW], [process.stderr, stderrW]]) {
  s.write = (chunk, enc, cb) => w.write(chunk, typeof enc === 'string' ? enc : undefined, typeof enc === 'function' ? enc : cb);
}
const cellConsole = new Console({ stdout: stdoutW, stderr: stderrW });

const sandbox = {
  console: cellConsole, process, require, Buffer, URL, URLSearchParams,
  setTimeout, clearTimeout, setInterval, clearInterval, setImmediate, clearImmediate,
  TextEncoder, TextDecoder, fetch: globalThis.fetch, structuredClone, queueMicrotask,
  display(value) { emit({ id: current, type: 'result', main: false, data: represent(value) }); },
};
sandbox.global = sandbox;
sandbox.globalThis = sandbox;
const context = vm.createContext(sandbox);

function represent(v) {
  const data = { 'text/plain': typeof v === 'string' ? v : util.inspect(v, { depth: 4 }) };
  if (v && typeof v === 'object') {
    if (typeof v._repr_html === 'function') data['text/html'] = String(v._repr_html());
    if (typeof v._repr_svg === 'function') data['image/svg+xml'] = String(v._repr_svg());
    if (typeof v._repr_markdown === 'function') data['text/markdown'] = String(v._repr_markdown());
    try {
      const proto = Object.getPrototypeOf(v);
      if (Array.isArray(v) || proto === null || Object.prototype.toString.call(v) === '[object Object]' && proto.constructor && proto.constructor.name === 'Object') data['application/json'] = JSON.parse(JSON.stringify(v));
    } catch (_) { /* not JSON-able */ }
  }
  return data;
}

function errorEvent(e) {
  if (e instanceof Error || (e && typeof e === 'object' && 'stack' in e)) {
    return { name: e.name || 'Error', value: e.message || String(e), traceback: String(e.stack || '') };
  }
  return { name: 'Error', value: util.inspect(e), traceback: '' };
}

let count = 0;
async function run(req) {
  current = req.id;
  count++;
  emit({ id: req.id, type: 'count', count });
  const saved = {};
  for (const [k, v] of Object.entries(req.envs || {})) { saved[k] = process.env[k]; process.env[k] = v; }
  try {
    const script = new vm.Script(req.code, { filename: 'cell' + count + '.js' });
    const opts = req.timeoutMs > 0 ? { timeout: req.timeoutMs, breakOnSigint: true } : { breakOnSigint: true };
    let value = script.runInContext(context, opts);
    if (value && typeof value.then === 'function') {
      let timer;
      const limit = req.timeoutMs > 0 ? new Promise((_, rej) => { timer = setTimeout(() => rej(Object.assign(new Error('Script execution timed out after ' + req.timeoutMs + 'ms'), { name: 'TimeoutError' })), req.timeoutMs); }) : null;
      try { value = await (limit ? Promise.race([value, limit]) : value); } finally { clearTimeout(timer); }
    }
    if (value !== undefined) emit({ id: req.id, type: 'result', main: true, data: represent(value) });
  } catch (e) {
    const ev = errorEvent(e);
    if (e && e.code === 'ERR_SCRIPT_EXECUTION_TIMEOUT') ev.name = 'TimeoutError';
    emit(Object.assign({ id: req.id, type: 'error' }, ev));
  } finally {
    for (const [k, v] of Object.entries(saved)) { if (v === undefined) delete process.env[k]; else process.env[k] = v; }
    emit({ id: req.id, type: 'done' });
    current = null;
  }
}

// Cells run one at a time, in order.
let queue = Promise.resolve();
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  let req;
  try { req = JSON.parse(line); } catch (_) { return; }
  queue = queue.then(() => run(req));
}).on('close', () => { queue.then(() => process.exit(0)); });
process.on('uncaughtException', (e) => emit(Object.assign({ id: current, type: 'error' }, errorEvent(e))));
process.on('unhandledRejection', (e) => emit(Object.assign({ id: current, type: 'error' }, errorEvent(e))));
emit({ type: 'ready' });
