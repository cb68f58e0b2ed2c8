"""Fresh processes with TensorFlow imported (07's, 08's), from a fork server or a :class:`Host`."""

import contextlib
import ctypes
import hashlib
import importlib
import ipaddress
import json
import multiprocessing
import multiprocessing.util  # registers its exit hook (it joins children) before any of ours
import os
import queue
import runpy
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

#: what the fork server imports once, for every child (TensorFlow quietly: helpers.preload)
PRELOAD = ["helpers.preload", "helpers.out_of_memory", "helpers.scale_out_profile"]
#: the process that launched a child, which ends itself when it is gone (:func:`follow_launcher`)
LAUNCHER_ENV = "COURSE_LAUNCHER_PID"


def context():
    """The ``multiprocessing`` context children come from: the fork server (POSIX only)."""
    server = multiprocessing.get_context("forkserver")
    server.set_forkserver_preload(PRELOAD)  # read when the server starts
    return server


def start_script(script, args: list[str], env: dict[str, str], log) -> multiprocessing.Process:
    """``python script *args`` in a child with just ``env``, output in ``log``, in its own group."""
    child = context().Process(target=_run_script, args=(str(script), [*args], {**env}, str(log)))
    child.start()
    return child


def _run_script(script: str, args: list[str], env: dict[str, str], log: str) -> None:
    os.setsid()
    os.environ.clear()
    os.environ.update(env)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for stream, number in ((sys.stdout, 1), (sys.stderr, 2)):
        stream.flush()
        os.dup2(fd, number)
    os.close(fd)
    sys.argv = [script, *args]
    runpy.run_path(script, run_name="__main__")


def follow_launcher(interval_s: float = 1.0) -> None:
    """In a child: SIGKILL it (and its group) once its launcher (:data:`LAUNCHER_ENV`) is gone."""
    launcher = os.environ.get(LAUNCHER_ENV)
    if not launcher:
        return
    launcher_pid, parent = int(launcher), os.getppid()  # the launcher, or its fork server

    def gone() -> bool:  # the launcher ended, or the process that started this one (re-parented)
        try:
            os.kill(launcher_pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, another user's
            pass
        return os.getppid() != parent

    def watch() -> None:
        while not gone():
            time.sleep(interval_s)
        if os.getpgid(0) == os.getpid():  # its own group: all of it
            os.killpg(os.getpid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="follow-launcher", daemon=True).start()


_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000  # unshare(2): user, network namespaces
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1  # ioctl(2) on a link's flags; up


def enter_own_network() -> str | None:
    """Move this process (Linux, one thread) to its own network namespace, loopback up; else why."""
    uid, gid = os.getuid(), os.getgid()
    try:
        if ctypes.CDLL(None, use_errno=True).unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
            return f"this machine refuses a network namespace ({os.strerror(ctypes.get_errno())})"
        for name, text in (("uid_map", f"{uid} {uid} 1"), ("setgroups", "deny"),
                           ("gid_map", f"{gid} {gid} 1")):
            Path("/proc/self", name).write_text(text)
        import fcntl  # noqa: PLC0415  (POSIX only)

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            request = struct.pack("16sH22x", b"lo", 0)
            flags = struct.unpack("16sH22x", fcntl.ioctl(probe, _SIOCGIFFLAGS, request))[1]
            fcntl.ioctl(probe, _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | _IFF_UP))
    except (OSError, AttributeError) as error:  # AttributeError: no unshare (not Linux)
        return f"this machine refuses a network namespace ({error})"
    others = [name for _, name in socket.if_nameindex() if name != "lo"]
    return f"its network namespace still has {', '.join(others)}" if others else None


#: A Host's LD_PRELOAD without a namespace: wildcard binds made loopback ([::]: ::ffff:127.0.0.1)
LOOPBACK_C = r"""#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <string.h>
int bind(int fd, const struct sockaddr *address, socklen_t size) {
    int (*real)(int, const struct sockaddr *, socklen_t) = dlsym(RTLD_NEXT, "bind");
    struct sockaddr_in6 copy = {0};  /* room for an IPv4 or an IPv6 address */
    struct sockaddr_in *v4 = (struct sockaddr_in *)&copy;
    if (!address || size > sizeof copy)  /* not IP (a Unix socket's path): as it is */
        return real(fd, address, size);
    memcpy(&copy, address, size);
    if (copy.sin6_family == AF_INET && v4->sin_addr.s_addr == htonl(INADDR_ANY))
        v4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (copy.sin6_family == AF_INET6 && IN6_IS_ADDR_UNSPECIFIED(&copy.sin6_addr))
        memcpy(copy.sin6_addr.s6_addr + 10, "\xff\xff\x7f\0\0\1", 6);  /* ::ffff:127.0.0.1 */
    return real(fd, (struct sockaddr *)&copy, size);
}
"""


def loopback_shim() -> str:
    """:data:`LOOPBACK_C` built by ``cc`` into the user's cache, once per source: its path."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "fast-tf-course")
    built = cache / f"loopback-{hashlib.sha256(LOOPBACK_C.encode()).hexdigest()[:16]}.so"
    if not built.exists():
        if not (cc := shutil.which("cc")):
            raise OSError("there is no C compiler (cc) to build the loopback shim")
        cache.mkdir(parents=True, exist_ok=True)
        partial = built.with_suffix(f".{os.getpid()}.partial")  # renamed once whole
        made = subprocess.run([cc, "-shared", "-fPIC", "-x", "c", "-", "-o", partial, "-ldl"],
                              input=LOOPBACK_C, capture_output=True, text=True)
        if made.returncode:
            raise OSError(f"cc failed to build the loopback shim ({' '.join(made.stderr.split())})")
        os.replace(partial, built)
    return str(built)


class Child:  # a process a Host forked, read as a multiprocessing.Process
    def __init__(self, pid: int):
        self.pid, self.exitcode, self._ended = pid, None, threading.Event()

    def join(self, timeout: float | None = None) -> None:
        self._ended.wait(timeout)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)  # its group (see _run_script): all it started

    def _end(self, code: int) -> None:
        self.exitcode = code
        self._ended.set()


class Host:
    """A fork server in a network of its own, or in this one with ``shim``; else ``refused``."""
    def __init__(self, shim: str | None = None):
        code = f"from helpers.processes import _serve; _serve({PRELOAD!r}, {shim!r})"
        root = str(Path(__file__).resolve().parent.parent)  # where this helpers is
        path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
        preload = " ".join(filter(None, [shim, os.environ.get("LD_PRELOAD")]))  # in every child
        self._process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True,
                                         env={**os.environ, "PYTHONPATH": path,
                                              "LD_PRELOAD": preload})
        said = json.loads(self._process.stdout.readline() or '{"refused": "the host failed"}')
        self.refused: str | None = said["refused"]
        self.isolated = self.refused is None and shim is None  # in a network namespace
        self._children: dict[int, Child] = {}
        self._replies, self._asking = queue.Queue(), threading.Lock()
        threading.Thread(target=self._read, name="host-reader", daemon=True).start()

    def _read(self) -> None:
        for line in self._process.stdout:
            said = json.loads(line)
            if "pid" in said:
                self._children[said["pid"]] = child = Child(said["pid"])
                self._replies.put(child)
            elif "exit" in said:
                self._children.pop(said["exit"])._end(said["code"])
        for child in self._children.values():  # the host is gone: so are they
            child.kill()
            child._end(-signal.SIGKILL)
        self._replies.put(None)

    def _ask(self, request: dict):
        with self._asking:
            if self._process.poll() is not None:
                raise RuntimeError(f"the workers' host has ended ({self.refused or 'it died'})")
            self._process.stdin.write(json.dumps(request) + "\n")
            self._process.stdin.flush()
            answer = self._replies.get()  # once PRELOAD is imported
        if answer is None:
            raise RuntimeError("the workers' host died")
        return answer

    def alive(self) -> bool:
        return self._process.poll() is None

    def start_script(self, script, args: list[str], env: dict[str, str], log) -> Child:
        """:func:`start_script`, forked by the host (in its network)."""
        return self._ask({"script": str(script), "args": list(args), "env": dict(env),
                          "log": str(log)})


def _serve(preload: list[str], shim: str | None) -> None:
    """A :class:`Host`'s program: a JSON line per request on stdin, per answer on stdout."""
    def say(message: dict) -> None:
        print(json.dumps(message), flush=True)

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a kernel's interrupt reaches its whole group
    refused = enter_own_network() if shim is None else None
    if shim:  # preloaded: a wildcard bind (never listened on) must get loopback
        with socket.socket() as probe:
            probe.bind(("0.0.0.0", 0))
            if probe.getsockname()[0] != "127.0.0.1":
                refused = "the loopback shim did not load"
    say({"refused": refused})
    if refused:
        return
    for name in preload:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    children, pending = set(), b""
    while True:
        ready = select.select([0], [], [], 0.2)[0]
        while children and (ended := os.waitpid(-1, os.WNOHANG))[0]:
            children.discard(ended[0])
            say({"exit": ended[0], "code": os.waitstatus_to_exitcode(ended[1])})
        if not ready:
            continue
        chunk = os.read(0, 1 << 16)
        if not chunk:  # the process that made this host is gone
            break
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            if (pid := os.fork()) == 0:
                _forked(request)
            else:
                children.add(pid)
                say({"pid": pid})
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def _forked(request: dict) -> None:
    """In a child of the host: run the script as ``python script *args`` would, then exit."""
    code = 1
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a python started anew
    try:
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        _run_script(request["script"], request["args"], request["env"], request["log"])
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else int(done.code is not None)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def free_ports(count: int) -> list[int]:
    """``count`` TCP ports free in this process's network now."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("localhost", 0))
        return [s.getsockname()[1] for s in sockets]


def listening(groups: set[int]) -> list[tuple]:
    """(address, port) of each TCP socket these process ``groups`` listen on here, from /proc."""
    here, sockets, found = os.readlink("/proc/self/ns/net"), set(), set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):  # it ended meanwhile
            if os.getpgid(int(pid)) in groups and os.readlink(f"/proc/{pid}/ns/net") == here:
                for fd in os.scandir(f"/proc/{pid}/fd"):
                    with contextlib.suppress(OSError):  # closed meanwhile
                        sockets.add(os.readlink(fd.path))
    for table in ("tcp", "tcp6"):  # addresses in hex, 32-bit words in host order; 0A: LISTEN
        with contextlib.suppress(OSError):  # no IPv6 here
            for line in Path("/proc/self/net", table).read_text().splitlines()[1:]:
                fields = line.split()
                hexed, port = fields[1].split(":")
                if fields[3] == "0A" and f"socket:[{fields[9]}]" in sockets:
                    words = [bytes.fromhex(hexed[i:i + 8])[::-1] for i in range(0, len(hexed), 8)]
                    ip = ipaddress.ip_address(b"".join(words))
                    found.add((getattr(ip, "ipv4_mapped", None) or ip, int(port, 16)))
    return sorted(found, key=str)
