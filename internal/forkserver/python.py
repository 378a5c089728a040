# airlock's run-code fork server (airlock template create NAME --run-code
# python; see docs/snapshots.md). It imports the modules named by its
# arguments, listens on the sandbox's abstract unix socket
# "airlock-run-code", creates $AIRLOCK_READY_FILE and is snapshotted there.
# A job is one connection of `/.airlock-agent run-code`: a 4-byte length,
# then a JSON object {argv, dir, env}, with the client's stdin, stdout and
# stderr passed as SCM_RIGHTS. A spare child, forked once the modules are
# imported and so before the snapshot, takes the first job, handed on over
# a socketpair in the same framing: the first fork after a restore is the
# dearest, and a pooled sandbox serves only a first job. A prime, a
# request {"prime": true} sent before any job (a pool does so before it
# pools the sandbox), has the spare touch every object it holds, so that
# the copies and faults a restored clone's first writes cost are paid
# then rather than by the job; the reply is {"exit": 0} once it is done,
# {"exit": 1} when there is no spare. Later jobs (and the first, should
# the spare be gone) get a child forked then. The child takes the three
# descriptors, reseeds what every clone of the snapshot shares, and runs
# argv[0] as __main__; a job that returns or calls sys.exit(N) ends
# without the teardown of what the server imported (end). Two JSON lines
# go back: {"pid": N} once the job has its process, then its status,
# {"exit": N} or {"signal": N}. The
# job is reaped only once the client has closed the connection, so that
# its pid stays waitable: the exec agent hands a job over itself and the
# host waits for that pid through the sentry. A client that goes away
# before the status (its exec timed out) takes its job with it: the job's
# process group is killed.
import errno, importlib, json, os, select, signal, socket, struct, sys

# The socket's name may be overridden for tests on the host.
SOCKET = "\0" + os.environ.get("AIRLOCK_RUN_CODE_SOCKET", "airlock-run-code")
MAX_JOB = 1 << 20
# The C library, to flush its streams at a job's end (end); None without
# ctypes, and jobs then end through the interpreter.
LIBC = None


def receive(conn):
    head, anc, flags, _ = conn.recvmsg(4, socket.CMSG_SPACE(3 * 4))
    fds = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            n = len(data) // 4
            fds += struct.unpack("%di" % n, data[: n * 4])
    try:
        if len(fds) != 3 or flags & socket.MSG_CTRUNC:
            raise ValueError("a job passes three descriptors")
        while len(head) < 4:
            more = conn.recv(4 - len(head))
            if not more:
                raise ValueError("torn job")
            head += more
        (size,) = struct.unpack(">I", head)
        if size > MAX_JOB:
            raise ValueError("job too large")
        body = b""
        while len(body) < size:
            more = conn.recv(min(size - len(body), 65536))
            if not more:
                raise ValueError("torn job")
            body += more
        job = json.loads(body)
        if job == {"prime": True}:
            return fds, job
        argv, wd, env = job["argv"], job["dir"], job["env"]
        if not argv or not all(isinstance(s, str) for s in argv + env + [wd]):
            raise ValueError("malformed job")
        return fds, job
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def line(obj):
    """One reply: a JSON object and a newline."""
    return json.dumps(obj).encode() + b"\n"


def relay(conn, pid, wake):
    """Sends the job's pid and then its status, and reaps it once the
    client has gone; a client gone before the status kills it."""
    status = None
    try:
        conn.sendall(line({"pid": pid}))
        while True:
            ready, _, _ = select.select([conn, wake], [], [])
            if wake in ready:
                try:
                    while os.read(wake, 512):
                        pass
                except BlockingIOError:
                    pass
            if status is None:
                # WNOWAIT: exited, not yet reaped.
                st = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                if st is not None and st.si_pid == pid:
                    if st.si_code == os.CLD_EXITED:
                        status = {"exit": st.si_status}
                    else:
                        status = {"signal": st.si_status}
                    conn.sendall(line(status))
            if conn in ready:
                break
    except OSError:
        pass  # the client is gone
    if status is None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            # Not yet a group of its own (setsid comes first in run).
            os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def reseed():
    # Clones of one snapshot share this memory: draw anew from the OS.
    import random, tempfile
    random.seed()
    tempfile._name_sequence = None
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed()
    ssl = sys.modules.get("ssl")
    if ssl is not None:
        # OpenSSL reseeds when its pid changes, and the spare child has
        # the same pid in every clone: stir its generator with the OS's
        # bytes too, whatever drew from it before the snapshot.
        ssl.RAND_add(os.urandom(32), 32.0)


def run(fds, job):
    """The child: becomes the job, never returns to the server."""
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        for i, fd in enumerate(fds):
            os.dup2(fd, i)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.chdir(job["dir"])
        os.environ.clear()
        for kv in job["env"]:
            k, sep, v = kv.partition("=")
            if sep and k:
                os.environ[k] = v
        reseed()
        path = job["argv"][0]
        sys.argv = list(job["argv"])
        sys.path[0] = os.path.dirname(os.path.abspath(path))
    except BaseException as e:
        try:
            os.write(2, ("airlock run-code: setting up the job: %s\n" % e).encode())
        finally:
            os._exit(126)

    def hook(kind, value, tb):
        # The job's traceback starts at its own file, as python3 FILE's does.
        while tb is not None and tb.tb_frame.f_code.co_filename != path:
            tb = tb.tb_next
        if value is not None:
            value.__traceback__ = tb
        sys.__excepthook__(kind, value, tb)

    sys.excepthook = hook
    code, g = load(path)
    try:
        if g is None:
            import runpy
            runpy.run_path(path, run_name="__main__")
        else:
            exec(code, g)
    except SystemExit as e:
        if not (e.code is None or type(e.code) is int and 0 <= e.code <= 255):
            raise
        code = e.code or 0
    else:
        code = 0
    # After the except block: its traceback would keep the job's frames,
    # and the files their locals hold, open.
    end(g, code)


def load(path):
    """The code of the file at path and the globals of the __main__ module
    it is to run in, left in sys.modules as python3 FILE's is; (None, None)
    for a directory or a zip, which runpy runs."""
    import io, pkgutil, types
    if pkgutil.get_importer(path) is not None:
        return None, None
    with io.open_code(os.path.abspath(path)) as f:
        code = pkgutil.read_code(f)  # a compiled file
    if code is None:
        with io.open_code(os.path.abspath(path)) as f:
            code = compile(f.read(), path, "exec")
    mod = types.ModuleType("__main__")
    mod.__dict__.update(__file__=path, __cached__=None, __loader__=None, __package__="", __spec__=None)
    sys.modules["__main__"] = mod
    return code, mod.__dict__


def end(g, code):
    """Ends a job that returned or called sys.exit(N) as python3 FILE ends,
    less the teardown of what the server imported, which the job's process
    would otherwise write to page by page (tens of milliseconds with numpy,
    in gVisor): its threads are waited for and its atexit functions run,
    its globals are freed (closing, and so flushing, the files they hold),
    then the standard streams and C's are flushed. Objects it left in
    other modules are not finalized; any failure takes the interpreter's
    own way out."""
    import atexit, gc
    threading = sys.modules.get("threading")
    shutdown = getattr(threading, "_shutdown", None) if threading else lambda: None
    if LIBC is None or g is None or shutdown is None or not hasattr(atexit, "_run_exitfuncs"):
        raise SystemExit(code)
    shutdown()
    atexit._run_exitfuncs()
    # As the interpreter clears a module at its exit: names with one
    # leading underscore first, then the rest but __builtins__.
    for first in (True, False):
        for k in list(g):
            if (k[:1] == "_" and k[:2] != "__") == first and k != "__builtins__":
                g[k] = None
    del g
    gc.collect()  # the job's own objects: the server's are frozen
    for f in (sys.stdout, sys.stderr):
        # As the interpreter does: a closed or missing stream is skipped.
        if f is None or getattr(f, "closed", False):
            continue
        try:
            f.flush()
        except Exception:
            raise SystemExit(120)
    LIBC.fflush(None)
    os._exit(code)


def send(conn, fds, job):
    """Hands a received job on, in receive's framing."""
    body = json.dumps(job).encode()
    head = struct.pack(">I", len(body))
    conn.sendmsg([head], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("3i", *fds))])
    conn.sendall(body)


def touch():
    """Writes to every object the process holds (a reference count each):
    a restored clone's pages are copied and mapped on their first write,
    which would otherwise be the job's, up to its interpreter's teardown."""
    import gc
    frozen = hasattr(gc, "freeze")
    if frozen:
        gc.unfreeze()
    for o in gc.get_objects():
        gc.get_referents(o)
    if frozen:
        gc.freeze()


def prime(waiting, fds):
    """Has the spare touch its objects (the prime's descriptors go with
    it, in a job's framing); returns the reply's exit code."""
    if waiting is None:
        return 1
    pid, ctl = waiting
    try:
        send(ctl, fds, {"prime": True})
        ctl.settimeout(60)
        ok = ctl.recv(1) == b"p"
        ctl.settimeout(None)
        return 0 if ok else 1
    except OSError:
        return 1


def spare():
    """Forks the child that waits for the first job; returns its pid and
    the server's end of their socketpair."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:
        ours.close()
        while True:
            try:
                fds, job = receive(theirs)
            except BaseException:
                os._exit(0)  # the server went, or never sent a job
            if "prime" not in job:
                break
            for fd in fds:
                os.close(fd)
            touch()
            theirs.sendall(b"p")
        theirs.close()
        run(fds, job)  # never returns
    theirs.close()
    return pid, ours


def main():
    for name in sys.argv[1:]:
        importlib.import_module(name)
    # What every job's set-up imports (reseed, run, and runpy.run_path's
    # own pkgutil: about 10 ms of a first job in gVisor), loaded once here.
    import atexit, gc, io, pkgutil, random, runpy, tempfile, types  # noqa: F401
    global LIBC
    try:
        import ctypes

        LIBC = ctypes.CDLL(None)
    except (ImportError, OSError):
        pass
    # What exists now is the snapshot's: a job's collections skip it, and
    # its end (end) leaves it be. touch unfreezes it for its walk.
    gc.collect()
    if hasattr(gc, "freeze"):
        gc.freeze()
    # Nothing buffered may reach a job's output through a child.
    sys.stdout.flush()
    sys.stderr.flush()
    waiting = spare()
    ln = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ln.bind(SOCKET)
    ln.listen(16)
    wake, poke = os.pipe()
    os.set_blocking(wake, False)
    os.set_blocking(poke, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(poke)
    sys.stdout.flush()
    sys.stderr.flush()
    open(os.environ["AIRLOCK_READY_FILE"], "w").close()
    while True:
        try:
            conn, _ = ln.accept()
        except OSError as e:
            # A connection aborted before it was taken is not the
            # server's end; anything else is.
            if e.errno in (errno.ECONNABORTED, errno.EPROTO):
                continue
            raise
        with conn:
            try:
                fds, job = receive(conn)
            except Exception:
                continue
            if "prime" in job:
                code = prime(waiting, fds)
                for fd in fds:
                    os.close(fd)
                try:
                    conn.sendall(line({"exit": code}))
                except OSError:
                    pass
                continue
            pid = None
            if waiting is not None:
                pid, ctl = waiting
                waiting = None
                try:
                    send(ctl, fds, job)
                except OSError:
                    # The spare is gone: reap it and fork.
                    try:
                        os.kill(pid, signal.SIGKILL)
                        os.waitpid(pid, 0)
                    except OSError:
                        pass
                    pid = None
                ctl.close()
            if pid is None:
                try:
                    pid = os.fork()
                except OSError:
                    for fd in fds:
                        os.close(fd)
                    continue
                if pid == 0:
                    ln.close()
                    os.close(wake)
                    os.close(poke)
                    break
            for fd in fds:
                os.close(fd)
            try:
                relay(conn, pid, wake)
            except Exception:
                pass
    run(fds, job)


main()
