"""hotcell code interpreter server (runs inside a hotcell/code sandbox).

Holds the sandbox's code contexts -- Python (an ipykernel through
jupyter_client), JavaScript (a Node vm context, jsrunner.js) and Bash (a
persistent bash) -- and serves E2B's code-interpreter protocol on
127.0.0.1:49999:

  GET    /health
  POST   /execute                {code, context_id | language, env_vars, timeout_ms}
  GET    /contexts
  POST   /contexts               {language, cwd, env_vars}
  POST   /contexts/{id}/restart
  DELETE /contexts/{id}

/execute answers NDJSON: stdout, stderr, result, error,
number_of_executions, keepalive and one end_of_execution. The hotcell
daemon reaches it through the agent and translates for its own API
(docs/code.md).
"""

import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CWD = "/home/user" if os.path.isdir("/home/user") else "/"
KEEPALIVE_S = 5.0
LANGUAGES = ("python", "javascript", "bash")
ALIASES = {"py": "python", "python3": "python", "js": "javascript", "node": "javascript", "sh": "bash", "shell": "bash"}
ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# MIME types of a Jupyter display bundle, by the name E2B gives each format.
FORMATS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
}


class BadRequest(Exception):
    pass


class NotFound(Exception):
    pass


def result_event(bundle, main):
    ev = {"type": "result", "is_main_result": bool(main)}
    for mime, value in (bundle or {}).items():
        name = FORMATS.get(mime)
        if name is None:
            continue
        if name in ("png", "jpeg", "pdf") and isinstance(value, str):
            value = value.replace("\n", "")
        ev[name] = value
    return ev


def kernel_died(detail):
    return {"type": "error", "name": "KernelDied", "traceback": "",
            "value": "the interpreter exited (%s); its state is lost and the next execution starts a new one" % detail}


def timeout_error(ms):
    return {"type": "error", "name": "TimeoutError", "traceback": "",
            "value": "execution interrupted after %d ms; the context keeps its state" % ms}


class Worker:
    """A thread that runs the calls given to it, one at a time.

    jupyter_client 7's blocking client runs asyncio ZeroMQ sockets under a
    per-thread event loop; used from several threads (one per HTTP request)
    a socket can lose a message. So a kernel's manager and client live on
    one thread of their own, and every call to them goes through it."""

    def __init__(self):
        self.q = queue.Queue()
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        while True:
            item = self.q.get()
            if item is None:
                return
            fn, box, done = item
            try:
                box["r"] = fn()
            except BaseException as e:
                box["e"] = e
            done.set()

    def call(self, fn):
        box, done = {}, threading.Event()
        self.q.put((fn, box, done))
        done.wait()
        if "e" in box:
            raise box["e"]
        return box.get("r")

    def stop(self):
        self.q.put(None)


class PythonKernel:
    """An ipykernel on a Worker of its own (see Worker)."""

    def __init__(self, cwd, envs):
        self._w = Worker()
        try:
            self._k = self._w.call(lambda: JupyterKernel(cwd, envs))
        except BaseException:
            self._w.stop()
            raise

    def __getattr__(self, name):
        f = getattr(self._k, name)
        return lambda *a, **kw: self._w.call(lambda: f(*a, **kw))

    def close(self):
        try:
            self._w.call(self._k.close)
        finally:
            self._w.stop()


class JupyterKernel:
    """An ipykernel driven through jupyter_client's blocking client; use it
    from one thread only (PythonKernel does)."""

    def __init__(self, cwd, envs):
        from jupyter_client import KernelManager
        env = dict(os.environ)
        env.update(envs or {})
        env.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
        env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # quiets the kernel's debugger
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=cwd, env=env)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def alive(self):
        return self.km.is_alive()

    def exit_detail(self):
        p = getattr(self.km, "provisioner", None)
        code = None
        if p is not None and getattr(p, "process", None) is not None:
            code = p.process.poll()
        return "exit code %s" % code if code is not None else "it died"

    def _quiet(self, code):
        """Runs code silently and waits for its reply (env changes, chdir)."""
        msg_id = self.kc.execute(code, silent=True, store_history=False)
        self._reply(msg_id, 30)

    def _reply(self, msg_id, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                msg = self.kc.get_shell_msg(timeout=0.2)
            except queue.Empty:
                if not self.alive():
                    return None
                continue
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg
        return None

    def execute(self, code, envs, timeout_ms, emit):
        if envs:
            self._quiet("import os as __hc_os\n__hc_saved = {k: __hc_os.environ.get(k) for k in %r}\n"
                        "__hc_os.environ.update(%r)" % (list(envs), dict(envs)))
        try:
            self._run(code, timeout_ms, emit)
        finally:
            if envs and self.alive():
                self._quiet("for __hc_k, __hc_v in __hc_saved.items():\n"
                            "    __hc_os.environ.pop(__hc_k, None) if __hc_v is None else __hc_os.environ.__setitem__(__hc_k, __hc_v)\n"
                            "del __hc_k, __hc_v, __hc_saved")

    def _run(self, code, timeout_ms, emit):
        msg_id = self.kc.execute(code, store_history=True, allow_stdin=False, stop_on_error=True)
        deadline = time.monotonic() + timeout_ms / 1000.0 if timeout_ms else None
        interrupted = False
        last = time.monotonic()
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=0.1)
            except queue.Empty:
                now = time.monotonic()
                if not self.alive():
                    emit(kernel_died(self.exit_detail()))
                    return
                if deadline and now > deadline:
                    if not interrupted:
                        self.km.interrupt_kernel()
                        interrupted = True
                        deadline = now + 5  # grace for the interrupt to land
                    else:
                        emit(timeout_error(timeout_ms))
                        emit(kernel_died("it ignored the interrupt and was killed"))
                        self.km.shutdown_kernel(now=True)
                        return
                if now - last > KEEPALIVE_S:
                    emit({"type": "keepalive"})
                    last = now
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue  # late output of an earlier, interrupted cell
            last = time.monotonic()
            t, c = msg["msg_type"], msg["content"]
            if t == "stream":
                emit({"type": "stdout" if c.get("name") == "stdout" else "stderr", "text": c.get("text", "")})
            elif t == "execute_input":
                emit({"type": "number_of_executions", "execution_count": c.get("execution_count")})
            elif t == "execute_result":
                emit(result_event(c.get("data"), True))
            elif t == "display_data":
                emit(result_event(c.get("data"), False))
            elif t == "error":
                if interrupted and c.get("ename") == "KeyboardInterrupt":
                    emit(timeout_error(timeout_ms))
                else:
                    emit({"type": "error", "name": c.get("ename", ""), "value": c.get("evalue", ""),
                          "traceback": "\n".join(c.get("traceback", []))})
            elif t == "status" and c.get("execution_state") == "idle":
                break
        self._reply(msg_id, 2)  # keep the shell channel drained

    def chdir(self, cwd):
        self._quiet("import os as __hc_os\n__hc_os.chdir(%r)" % cwd)

    def restart(self):
        if self.alive():
            self.km.restart_kernel(now=True)
        else:
            self.km.start_kernel()
        self.kc.stop_channels()
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def close(self):
        try:
            self.kc.stop_channels()
        finally:
            self.km.shutdown_kernel(now=True)


class PipeKernel:
    """Common parts of the JavaScript and Bash interpreters: a child process
    in a session of its own, restarted by restart()."""

    def __init__(self, cwd, envs):
        self.cwd, self.envs = cwd, dict(envs or {})
        self.count = 0
        self.proc = None
        self.start()

    def env(self):
        env = dict(os.environ)
        env.update(self.envs)
        return env

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def exit_detail(self):
        code = self.proc.poll() if self.proc else None
        if code is None:
            return "it died"
        if code < 0:
            return "killed by signal %d" % -code
        return "exit code %d" % code

    def restart(self):
        self.close()
        self.count = 0
        self.start()

    def close(self):
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f:
                f.close()

    def interrupt(self):
        try:
            os.killpg(self.proc.pid, signal.SIGINT)
        except OSError:
            pass


class JSKernel(PipeKernel):
    def start(self):
        r, w = os.pipe()
        env = self.env()
        env["HOTCELL_EVENTS_FD"] = str(w)
        self.proc = subprocess.Popen(
            ["node", os.path.join(HERE, "jsrunner.js")], cwd=self.cwd, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=(w,), start_new_session=True)
        os.close(w)
        self.events = os.fdopen(r, "rb")
        self.q = queue.Queue()
        threading.Thread(target=self._read_events, daemon=True).start()
        # What a child of the cell writes to fd 1 or 2 is output of the cell.
        for stream, name in ((self.proc.stdout, "stdout"), (self.proc.stderr, "stderr")):
            threading.Thread(target=self._read_raw, args=(stream, name), daemon=True).start()
        ev = self.q.get(timeout=30)
        if ev.get("type") != "ready":
            raise RuntimeError("javascript runner did not start: %r" % ev)

    def _read_events(self):
        for line in self.events:
            try:
                self.q.put(json.loads(line))
            except ValueError:
                pass
        self.q.put({"type": "exit"})

    def _read_raw(self, stream, name):
        while True:
            data = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
            if not data:
                return
            self.q.put({"type": name, "text": data.decode("utf-8", "replace"), "raw": True})

    def execute(self, code, envs, timeout_ms, emit):
        rid = uuid.uuid4().hex
        self.proc.stdin.write((json.dumps({"id": rid, "code": code, "envs": envs or {}, "timeoutMs": timeout_ms}) + "\n").encode())
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout_ms / 1000.0 + 1 if timeout_ms else None
        interrupted = False
        last = time.monotonic()
        while True:
            try:
                ev = self.q.get(timeout=0.1)
            except queue.Empty:
                now = time.monotonic()
                if not self.alive():
                    emit(kernel_died(self.exit_detail()))
                    return
                if deadline and now > deadline:
                    if not interrupted:
                        self.interrupt()  # breakOnSigint stops a synchronous loop
                        interrupted, deadline = True, now + 3
                    else:
                        emit(timeout_error(timeout_ms))
                        emit(kernel_died("it ignored the interrupt and was killed"))
                        self.close()
                        return
                if now - last > KEEPALIVE_S:
                    emit({"type": "keepalive"})
                    last = now
                continue
            last = time.monotonic()
            t = ev.get("type")
            if t == "exit":
                emit(kernel_died(self.exit_detail() if self.proc.wait(5) is not None else "it died"))
                return
            if not ev.get("raw") and ev.get("id") != rid:
                continue
            if t in ("stdout", "stderr"):
                emit({"type": t, "text": ev["text"]})
            elif t == "count":
                emit({"type": "number_of_executions", "execution_count": ev["count"]})
            elif t == "result":
                emit(result_event(ev.get("data"), ev.get("main")))
            elif t == "error":
                if interrupted and ev.get("name") != "TimeoutError":
                    emit(timeout_error(timeout_ms))
                elif ev.get("name") == "TimeoutError":
                    emit(timeout_error(timeout_ms))
                else:
                    emit({"type": "error", "name": ev.get("name", ""), "value": ev.get("value", ""), "traceback": ev.get("traceback", "")})
            elif t == "done":
                return

    def chdir(self, cwd):
        self.execute("process.chdir(%s)" % json.dumps(cwd), {}, 10000, lambda ev: None)


class BashKernel(PipeKernel):
    """A persistent bash. A cell is sourced from a file, then a marker with
    the status goes to stdout and another to stderr; output up to the markers
    is the cell's."""

    def start(self):
        self.marker = "__hotcell_cell_done_%s__" % uuid.uuid4().hex
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"], cwd=self.cwd, env=self.env(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True)
        self.q = queue.Queue()
        for stream, name in ((self.proc.stdout, "stdout"), (self.proc.stderr, "stderr")):
            threading.Thread(target=self._read, args=(stream, name), daemon=True).start()
        self.cells = "/tmp/.hotcell-bash-%d" % self.proc.pid
        os.makedirs(self.cells, mode=0o700, exist_ok=True)
        # An interrupted cell returns from `source`; the shell lives on.
        self._send("trap 'return 130 2>/dev/null' INT\n")

    def _send(self, s):
        self.proc.stdin.write(s.encode())
        self.proc.stdin.flush()

    def _read(self, stream, name):
        while True:
            data = stream.read1(65536)
            if not data:
                self.q.put((name, None))
                return
            self.q.put((name, data))

    def execute(self, code, envs, timeout_ms, emit):
        self.count += 1
        emit({"type": "number_of_executions", "execution_count": self.count})
        path = os.path.join(self.cells, "cell%d.sh" % self.count)
        with open(path, "w") as f:
            f.write(code + "\n")
        pre, post = "", ""
        for k, v in (envs or {}).items():
            pre += "if [ -n \"${%s+x}\" ]; then __hc_had_%s=1; __hc_old_%s=$%s; else __hc_had_%s=0; fi; export %s=%s\n" % (
                k, k, k, k, k, k, shquote(v))
            post += "if [ $__hc_had_%s = 1 ]; then export %s=\"$__hc_old_%s\"; else unset %s; fi; unset __hc_had_%s __hc_old_%s\n" % (k, k, k, k, k, k)
        m = self.marker
        self._send(pre + "source %s\n__hc_status=$?\n%sprintf '\\n%s %%d\\n' $__hc_status; printf '\\n%s\\n' >&2\n" % (
            shquote(path), post, m, m))
        bufs = {"stdout": b"", "stderr": b""}
        done = {"stdout": False, "stderr": False}
        status = 0
        mk = ("\n" + m).encode()
        deadline = time.monotonic() + timeout_ms / 1000.0 if timeout_ms else None
        interrupted = False
        last = time.monotonic()
        while not (done["stdout"] and done["stderr"]):
            try:
                name, data = self.q.get(timeout=0.1)
            except queue.Empty:
                now = time.monotonic()
                if not self.alive():
                    emit(kernel_died(self.exit_detail()))
                    return
                if deadline and now > deadline:
                    if not interrupted:
                        self.interrupt()
                        interrupted, deadline = True, now + 3
                    else:
                        emit(timeout_error(timeout_ms))
                        emit(kernel_died("it ignored the interrupt and was killed"))
                        self.close()
                        return
                if now - last > KEEPALIVE_S:
                    emit({"type": "keepalive"})
                    last = now
                continue
            last = time.monotonic()
            if data is None:
                self.proc.wait(5)
                for n, b in bufs.items():
                    if b:
                        emit({"type": n, "text": b.decode("utf-8", "replace")})
                emit(kernel_died(self.exit_detail()))
                return
            buf = bufs[name] + data
            i = buf.find(mk)
            if i >= 0:
                head, rest = buf[:i], buf[i + len(mk):]
                if name == "stdout":
                    try:
                        status = int(rest.split(b"\n", 1)[0].strip() or b"0")
                    except ValueError:
                        status = 0
                done[name] = True
                bufs[name] = b""
                if head:
                    emit({"type": name, "text": head.decode("utf-8", "replace")})
                continue
            # Hold back a tail that may be the start of the marker.
            keep = 0
            for n in range(min(len(mk) - 1, len(buf)), 0, -1):
                if mk.startswith(buf[-n:]):
                    keep = n
                    break
            out, bufs[name] = buf[:len(buf) - keep], buf[len(buf) - keep:]
            # Never split a UTF-8 sequence: keep its start for the next read.
            cut = len(out)
            while cut > 0 and len(out) - cut < 4 and (out[cut - 1] & 0xC0) == 0x80:
                cut -= 1
            if cut > 0 and out[cut - 1] >= 0xC0:
                cut -= 1
            else:
                cut = len(out)
            out, bufs[name] = out[:cut], out[cut:] + bufs[name]
            if out:
                emit({"type": name, "text": out.decode("utf-8", "replace")})
        try:
            os.unlink(path)
        except OSError:
            pass
        if interrupted:
            emit(timeout_error(timeout_ms))
        elif status != 0:
            emit({"type": "error", "name": "ExitError", "value": "exit status %d" % status, "traceback": ""})

    def chdir(self, cwd):
        self.execute("cd %s" % shquote(cwd), {}, 10000, lambda ev: None)

    def close(self):
        super().close()
        shutil.rmtree(getattr(self, "cells", ""), ignore_errors=True) if getattr(self, "cells", "") else None


def shquote(s):
    return "'" + str(s).replace("'", "'\\''") + "'"


KERNELS = {"python": PythonKernel, "javascript": JSKernel, "bash": BashKernel}


class Context:
    def __init__(self, language, cwd, envs, kernel=None):
        self.id = str(uuid.uuid4())
        self.language, self.cwd, self.envs = language, cwd, dict(envs or {})
        self.lock = threading.Lock()
        self.kernel = kernel
        self.crashed = None

    def info(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def ensure(self, emit):
        """Starts the interpreter again if it died; emits a note saying so."""
        if self.kernel is not None and self.kernel.alive():
            return
        old = self.kernel
        self.kernel = None
        if old is not None:
            try:
                old.close()
            except Exception:
                pass
            emit({"type": "stderr", "text": "[hotcell] the %s interpreter had exited; started a new one (earlier state is gone)\n" % self.language})
        self.kernel = KERNELS[self.language](self.cwd, self.envs)


class Contexts:
    def __init__(self):
        self.lock = threading.Lock()
        self.by_id = {}
        self.defaults = {}
        self.spare = None  # a started Python kernel for the next Python context
        self.spare_lock = threading.Lock()

    def refill(self):
        def run():
            with self.spare_lock:
                if self.spare is None:
                    try:
                        self.spare = PythonKernel(DEFAULT_CWD, {})
                    except Exception as e:  # the next create starts its own
                        print("warm python kernel: %s" % e, file=sys.stderr)
        threading.Thread(target=run, daemon=True).start()

    def take_spare(self):
        with self.spare_lock:
            k, self.spare = self.spare, None
        self.refill()
        return k if k is not None and k.alive() else None

    def create(self, language, cwd, envs):
        language = ALIASES.get((language or "python").lower(), (language or "python").lower())
        if language not in LANGUAGES:
            raise BadRequest("language %r is not supported: use python, javascript or bash" % language)
        cwd = cwd or DEFAULT_CWD
        if not os.path.isdir(cwd):
            raise BadRequest("cwd %r is not a directory" % cwd)
        for k in envs or {}:
            if not ENV_KEY.match(k):
                raise BadRequest("env_vars: %r is not a valid variable name" % k)
        kernel = None
        if language == "python" and not envs:
            kernel = self.take_spare()
            if kernel is not None and cwd != DEFAULT_CWD:
                kernel.chdir(cwd)
        if kernel is None:
            kernel = KERNELS[language](cwd, envs)
        ctx = Context(language, cwd, envs, kernel)
        with self.lock:
            self.by_id[ctx.id] = ctx
        return ctx

    def get(self, cid):
        with self.lock:
            ctx = self.by_id.get(cid)
        if ctx is None:
            raise NotFound("context %s not found" % cid)
        return ctx

    def default(self, language):
        language = ALIASES.get((language or "python").lower(), (language or "python").lower())
        if language not in LANGUAGES:
            raise BadRequest("language %r is not supported: use python, javascript or bash" % language)
        with self.lock:
            cid = self.defaults.get(language)
            if cid in self.by_id:
                return self.by_id[cid]
        ctx = self.create(language, DEFAULT_CWD, {})
        with self.lock:
            cid = self.defaults.get(language)
            if cid in self.by_id:  # another request won the race
                winner = self.by_id[cid]
                self.by_id.pop(ctx.id, None)
                ctx.kernel.close()
                return winner
            self.defaults[language] = ctx.id
        return ctx

    def list(self):
        with self.lock:
            return [c.info() for c in self.by_id.values()]

    def remove(self, cid):
        with self.lock:
            ctx = self.by_id.pop(cid, None)
            for lang, d in list(self.defaults.items()):
                if d == cid:
                    del self.defaults[lang]
        if ctx is None:
            raise NotFound("context %s not found" % cid)
        with ctx.lock:
            if ctx.kernel is not None:
                ctx.kernel.close()


CONTEXTS = Contexts()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "hotcell-code/1"

    def log_message(self, fmt, *args):
        pass

    def setup(self):
        super().setup()
        # Each event goes out as it happens: no Nagle delay on small writes.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if not raw:
            return {}
        try:
            v = json.loads(raw)
        except ValueError as e:
            raise BadRequest("body is not JSON: %s" % e)
        if not isinstance(v, dict):
            raise BadRequest("body must be a JSON object")
        return v

    def reply(self, status, obj=None):
        data = b"" if obj is None else json.dumps(obj).encode()
        self.send_response(status)
        if obj is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def fail(self, e):
        if isinstance(e, BadRequest):
            self.reply(400, {"error": str(e)})
        elif isinstance(e, NotFound):
            self.reply(404, {"error": str(e)})
        else:
            self.reply(500, {"error": "%s: %s" % (type(e).__name__, e)})

    def route(self):
        return self.path.split("?", 1)[0].rstrip("/") or "/"

    def do_GET(self):
        try:
            p = self.route()
            if p == "/health":
                self.reply(200, {"status": "ok"})
            elif p == "/contexts":
                self.reply(200, CONTEXTS.list())
            else:
                raise NotFound("no route GET %s" % p)
        except Exception as e:
            self.fail(e)

    def do_DELETE(self):
        try:
            m = re.fullmatch(r"/contexts/([^/]+)", self.route())
            if not m:
                raise NotFound("no route DELETE %s" % self.route())
            CONTEXTS.remove(m.group(1))
            self.reply(204)
        except Exception as e:
            self.fail(e)

    def do_POST(self):
        try:
            p = self.route()
            if p == "/execute":
                return self.execute(self.body())
            if p == "/contexts":
                b = self.body()
                ctx = CONTEXTS.create(b.get("language"), b.get("cwd"), b.get("env_vars") or b.get("envs") or {})
                return self.reply(200, ctx.info())
            m = re.fullmatch(r"/contexts/([^/]+)/restart", p)
            if m:
                ctx = CONTEXTS.get(m.group(1))
                with ctx.lock:
                    if ctx.kernel is not None and ctx.kernel.alive():
                        ctx.kernel.restart()
                    else:
                        ctx.ensure(lambda ev: None)
                return self.reply(204)
            raise NotFound("no route POST %s" % p)
        except Exception as e:
            self.fail(e)

    def execute(self, b):
        code = b.get("code")
        if not isinstance(code, str):
            raise BadRequest("code must be a string")
        envs = b.get("env_vars") or {}
        if not isinstance(envs, dict):
            raise BadRequest("env_vars must be an object")
        for k, v in envs.items():
            if not ENV_KEY.match(k) or not isinstance(v, str):
                raise BadRequest("env_vars: %r must be a variable name with a string value" % k)
        timeout_ms = int(b.get("timeout_ms") or 0)
        cid = b.get("context_id")
        if cid:
            if b.get("language"):
                raise BadRequest("give context_id or language, not both")
            ctx = CONTEXTS.get(cid)
        else:
            ctx = CONTEXTS.default(b.get("language"))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        # An execution's connection is not reused: a proxy's pooled
        # connection cannot then race the end of a long stream.
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()
        wlock = threading.Lock()
        state = {"gone": False}

        def emit(ev):
            if state["gone"]:
                return
            data = json.dumps(ev).encode() + b"\n"
            with wlock:
                try:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                except OSError:
                    state["gone"] = True

        # Wait for the context (another cell may run) with keepalives.
        while not ctx.lock.acquire(timeout=KEEPALIVE_S):
            emit({"type": "keepalive"})
        try:
            ctx.ensure(emit)
            ctx.kernel.execute(code, envs, timeout_ms, emit)
        except Exception as e:
            emit({"type": "error", "name": "InternalError", "value": "%s: %s" % (type(e).__name__, e), "traceback": ""})
        finally:
            ctx.lock.release()
        emit({"type": "end_of_execution"})
        with wlock:
            try:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                pass


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 49999
    srv = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    srv.daemon_threads = True
    CONTEXTS.refill()
    srv.serve_forever()


if __name__ == "__main__":
    main()
