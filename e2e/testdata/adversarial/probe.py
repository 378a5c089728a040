# Attempts each escape the adversarial suite checks, from inside one
# sandbox, and prints one line per attempt: NAME RESULT [DETAIL].
# RESULT is "ok" when the attempt succeeded, "errno=N" when the kernel
# refused it, or a word a check defines. argv: host TCP port, host
# abstract socket name, host unix socket path, host pid, host file path,
# port of another sandbox's listener.
import os

# Before anything opens a file: every descriptor beyond stdio was inherited.
inherited = []
for fd in range(3, 1024):
    try:
        os.fstat(fd)
        inherited.append(fd)
    except OSError:
        pass

import ctypes, errno, resource, signal, socket, stat, struct, sys, time

host_port, abstract, host_sock, host_pid, host_file, peer_port = sys.argv[1:7]
libc = ctypes.CDLL(None, use_errno=True)


def say(name, result, detail=""):
    print(name, result, detail, flush=True)


def attempt(name, fn, detail=""):
    try:
        fn()
        say(name, "ok", detail)
    except OSError as e:
        say(name, "errno=%d" % e.errno, detail or e.strerror)


def sys_call(nr, *args):
    conv = [a if isinstance(a, (bytes, type(None))) else ctypes.c_long(a) for a in args]
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *conv)
    if r == -1:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r


def syscall_attempt(name, nr, *args):
    attempt(name, lambda: sys_call(nr, *args))


def read_file(path, n=65536):
    with open(path, "rb") as f:
        return f.read(n)


def connect(family, kind, addr, timeout=3):
    s = socket.socket(family, kind)
    s.settimeout(timeout)
    try:
        s.connect(addr)
    finally:
        s.close()


say("inherited_fds", "none" if not inherited else "open", " ".join(map(str, inherited)))

# Network.
attempt("egress_testnet", lambda: connect(socket.AF_INET, socket.SOCK_STREAM, ("192.0.2.1", 80)))


def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.sendto(b"x", ("192.0.2.1", 53))
    finally:
        s.close()


attempt("egress_udp", udp)
attempt("egress_ipv6", lambda: connect(socket.AF_INET6, socket.SOCK_STREAM, ("2001:db8::1", 80)))
attempt("metadata", lambda: connect(socket.AF_INET, socket.SOCK_STREAM, ("169.254.169.254", 80)))
attempt("host_loopback", lambda: connect(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", int(host_port))))
attempt("other_sandbox", lambda: connect(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", int(peer_port))))
try:
    socket.getaddrinfo("example.com", 80)
    say("dns", "ok")
except socket.gaierror as e:
    say("dns", "gaierror", str(e.errno))
attempt("raw_socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close())
attempt("packet_socket", lambda: socket.socket(17, socket.SOCK_RAW, socket.htons(3)).close())
attempt("netlink_socket", lambda: socket.socket(16, socket.SOCK_RAW, 0).close())
attempt("vsock_socket", lambda: socket.socket(40, socket.SOCK_STREAM, 0).close())
attempt("alg_socket", lambda: socket.socket(38, socket.SOCK_SEQPACKET, 0).close())
attempt("host_abstract_socket", lambda: connect(socket.AF_UNIX, socket.SOCK_STREAM, "\0" + abstract))
attempt("host_unix_socket", lambda: connect(socket.AF_UNIX, socket.SOCK_STREAM, host_sock))
say("interfaces", "list", ",".join(sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:])))


def self_loopback():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        c = socket.create_connection(srv.getsockname(), timeout=3)
        a, _ = srv.accept()
        c.sendall(b"ping")
        if a.recv(4) != b"ping":
            raise OSError(errno.EIO, "echo mismatch")
        a.close()
        c.close()
    finally:
        srv.close()


attempt("self_loopback", self_loopback)

# Filesystem.
attempt("write_root", lambda: os.close(os.open("/airlock-probe", os.O_CREAT | os.O_WRONLY, 0o644)))
attempt("write_etc", lambda: os.close(os.open("/etc/passwd", os.O_WRONLY | os.O_APPEND)))
attempt("write_image_binary", lambda: os.close(os.open(os.path.realpath(sys.executable), os.O_WRONLY)))
# Opening for write is the attempt; nothing is written if it opens.
attempt("proc_sys_hostname", lambda: os.close(os.open("/proc/sys/kernel/hostname", os.O_WRONLY)))
attempt("proc_sysrq_trigger", lambda: os.close(os.open("/proc/sysrq-trigger", os.O_WRONLY)))
attempt("proc_sys_vm", lambda: os.close(os.open("/proc/sys/vm/drop_caches", os.O_WRONLY)))
for name, path in (("proc_kcore", "/proc/kcore"), ("proc_keys", "/proc/keys"), ("proc_cmdline", "/proc/cmdline"),
                   ("proc_timer_list", "/proc/timer_list"), ("proc_sched_debug", "/proc/sched_debug"),
                   ("proc_interrupts", "/proc/interrupts")):
    try:
        b = read_file(path)
        say(name, "empty" if not b else "read", b.hex())
    except OSError as e:
        say(name, "errno=%d" % e.errno, e.strerror)
try:
    say("sys_firmware", "list", ",".join(sorted(os.listdir("/sys/firmware"))) or "-")
except OSError as e:
    say("sys_firmware", "errno=%d" % e.errno, e.strerror)
say("dev", "list", ",".join(sorted(os.listdir("/dev"))))
attempt("mknod", lambda: os.mknod("/tmp/mem", stat.S_IFCHR | 0o600, os.makedev(1, 1)))
os.makedirs("/tmp/mnt", exist_ok=True)
syscall_attempt("mount_tmpfs", 165, b"none", b"/tmp/mnt", b"tmpfs", 0, None)
syscall_attempt("mount_proc", 165, b"proc", b"/tmp/mnt", b"proc", 0, None)
# find / -perm /6000, leaving out the kernel's filesystems.
setuid = []
for d, dirs, files in os.walk("/"):
    if d == "/":
        dirs[:] = [x for x in dirs if x not in ("proc", "sys", "dev")]
    for f in files:
        try:
            if os.lstat(os.path.join(d, f)).st_mode & (stat.S_ISUID | stat.S_ISGID):
                setuid.append(os.path.join(d, f))
        except OSError:
            pass
say("setuid_files", "none" if not setuid else "found", " ".join(setuid[:10]))
say("cwd", "path", os.getcwd())
attempt("host_file", lambda: os.close(os.open(host_file, os.O_WRONLY | os.O_TRUNC)))
attempt("leftover_tmp_write", lambda: open("/tmp/airlock-leftover", "w").write("left\n"))
attempt("leftover_out_write", lambda: open("/out/leftover.txt", "w").write("left\n"))

# Privilege.
status = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
say("capabilities", "sets", " ".join("%s=%s" % (k, status.get(k, "?").strip()) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")))
say("no_new_privs", "value", status.get("NoNewPrivs", "?").strip())
say("identity", "ids", "uid=%s gid=%s groups=%s" % (",".join(map(str, os.getresuid())), ",".join(map(str, os.getresgid())),
                                                      ",".join(map(str, os.getgroups())) or "-"))
attempt("setuid_root", lambda: os.setuid(0))
attempt("setgid_root", lambda: os.setgid(0))
attempt("setgroups", lambda: os.setgroups([0]))
# capset(v3 header, all bits): raise every capability.
hdr = struct.pack("Ii", 0x20080522, 0)
data = struct.pack("IIIIII", 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0, 0)
syscall_attempt("capset", 126, hdr, data)
syscall_attempt("ptrace_traceme", 101, 0, 0, 0, 0)
child = os.fork()
if child == 0:
    time.sleep(30)
    os._exit(0)
syscall_attempt("ptrace_attach", 101, 16, child, 0, 0)
os.kill(child, signal.SIGKILL)
os.waitpid(child, 0)
syscall_attempt("init_module", 175, b"\0" * 64, 64, b"")
with open("/dev/null", "rb") as f:
    syscall_attempt("finit_module", 313, f.fileno(), b"", 0)
syscall_attempt("kexec_load", 246, 0, 0, 0, 0)
syscall_attempt("keyctl", 250, 0, -3, 0)
syscall_attempt("add_key", 248, b"user", b"airlock", b"x", 1, -3)
syscall_attempt("bpf", 321, 5, b"\0" * 128, 128)
syscall_attempt("perf_event_open", 298, b"\0" * 128, 0, -1, -1, 0)
syscall_attempt("userfaultfd", 323, 0)
syscall_attempt("io_uring_setup", 425, 1, b"\0" * 120)
syscall_attempt("unshare_user", 272, 0x10000000)
syscall_attempt("unshare_mount", 272, 0x00020000)


def clone_newuser():
    # Raw clone(CLONE_NEWUSER|SIGCHLD): a child that got through exits at once.
    pid = sys_call(56, 0x10000000 | signal.SIGCHLD, 0, 0, 0, 0)
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


attempt("clone_newuser", clone_newuser)
syscall_attempt("setns", 308, 0, 0)
os.makedirs("/tmp/cg", exist_ok=True)
syscall_attempt("mount_cgroup", 165, b"cgroup", b"/tmp/cg", b"cgroup", 0, b"rdma")
agents = []
for d, dirs, files in os.walk("/sys/fs/cgroup"):
    agents += [os.path.join(d, f) for f in files if f == "release_agent"]
writable = []
for p in agents:
    try:
        os.close(os.open(p, os.O_WRONLY))
        writable.append(p)
    except OSError:
        pass
# release_agent runs a host command as root when a cgroup empties: none
# may be writable, and no cgroup may be made.
try:
    os.mkdir("/sys/fs/cgroup/airlock-probe")
    say("cgroup_write", "ok", "mkdir")
except OSError as e:
    say("cgroup_write", "errno=%d" % e.errno, "writable release_agent: " + (" ".join(writable) or "none"))
syscall_attempt("chroot", 161, b"/tmp")
syscall_attempt("pivot_root", 155, b"/tmp", b"/tmp/mnt")
syscall_attempt("sethostname", 170, b"pwned", 5)
syscall_attempt("reboot", 169, 0xfee1dead, 672274793, 0, None)
syscall_attempt("open_by_handle_at", 304, -100, b"\x08\0\0\0\x01\0\0\0" + b"\0" * 8, 0)
syscall_attempt("iopl", 172, 3)
syscall_attempt("syslog", 103, 3, b"\0" * 64, 64)
attempt("kill_host_pid", lambda: os.kill(int(host_pid), 0))
say("pids_visible", "list", ",".join(sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int)))


def argv0(pid):
    try:
        return read_file("/proc/%s/cmdline" % pid).split(b"\0")[0].decode(errors="replace")
    except OSError:
        return "?"


say("pid_programs", "list", ",".join("%s=%s" % (p, argv0(p)) for p in sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int)))

# Secrets.
say("environment", "names", ",".join(sorted(os.environ)))
say("environ", "hex", b"\0".join(b"%s=%s" % kv for kv in sorted(os.environb.items())).hex())
try:
    h = read_file("/proc/sys/kernel/hostname").decode().strip()
except OSError as e:
    h = "errno=%d" % e.errno
say("hostname", "names", socket.gethostname() + "," + h)
for name, path in (("machine_id", "/etc/machine-id"), ("resolv_conf", "/etc/resolv.conf"), ("etc_hostname", "/etc/hostname"),
                   ("etc_hosts", "/etc/hosts")):
    try:
        say(name, "read", read_file(path).hex() or "-")
    except OSError as e:
        say(name, "errno=%d" % e.errno, e.strerror)
for name, path in (("docker_socket", "/var/run/docker.sock"), ("docker_socket_run", "/run/docker.sock"),
                   ("containerd_socket", "/run/containerd/containerd.sock")):
    attempt(name, lambda: connect(socket.AF_UNIX, socket.SOCK_STREAM, path))

# Resources.
fds = []
try:
    while True:
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError as e:
    say("fd_exhaustion", "errno=%d" % e.errno, "opened=%d nofile=%d" % (len(fds), resource.getrlimit(resource.RLIMIT_NOFILE)[0]))
for fd in fds:
    os.close(fd)
say("done", "ok")
