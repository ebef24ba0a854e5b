"""`sudo` for a sandbox's `user`: a program the sandbox runs, set-user-ID nowhere. Stdlib only.

The sandbox factory copies this file, behind a `#!` line naming a python of the sandbox's own
system directories, and each sandbox's PID 1 mounts it read-only at /usr/bin/sudo. It runs
with its caller's rights and gains none: it asks PID 1, on the socket PID 1 listens on in the
sandbox (`SOCKET`), to start a command, and hands over its stdin, stdout and stderr (as
SCM_RIGHTS), the command, its directory and environment, and the account to run it as. PID 1
serves only the sandbox's `user` and root (it checks SO_PEERCRED), and starts the command as
it starts any command of that account. This process waits for the exit, passes on
SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2, and ends as the command did. Like
E2B's, this `sudo` never asks for a password.

On a terminal (stdin, stdout and stderr terminals, sudo in the foreground), the command gets
a terminal of its own, which PID 1 makes with the modes and size of sudo's: sudo puts its own
in raw mode and relays bytes both ways, and passes its size on when it changes (SIGWINCH), so
the command's terminal is its controlling terminal (`sudo -i` has job control, `tty` names
it), as with the host's sudo.

Messages: PID 1 sends `go` (or `error: WHY`, and hangs up); this program sends `sudo` with
its request (in a memfd) and stdin, stdout and stderr (`sudo tty ROWS COLS` on a terminal,
answered with `tty` and the other end of the command's terminal), then `signal N` for each
signal it passes on; PID 1 ends with `exit CODE` (negative: killed by that signal) or
`error: WHY`.
The request: NUL-separated user name, uid, gid, directory, argument count, the arguments,
then the environment's NAME=value entries.
"""

from __future__ import annotations

# `_socket`, not `socket`, whose enums and selectors would take longer to import than all
# the rest of sudo's start (40 ms of 75 on a loaded machine)
import _socket
import os
import pwd
import signal
import struct
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # `typing` would slow every sudo's start
    from collections.abc import Mapping

SOCKET = "/run/sudo/socket"
_FORWARDED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
_DRAINING_MS = 1000
"""How long sudo passes on what the command's terminal shows after the command has ended,
while a process it left keeps the terminal open."""
_KEPT = ("TERM", "COLORTERM", "DISPLAY", "XAUTHORITY", "LANG", "LANGUAGE", "TZ", "PATH")
"""What of the caller's environment a command keeps without -E (and LC_* variables), as
sudo's defaults keep it (PATH too: no secure_path is set)."""
_USAGE = """usage: sudo [-EHnSk] [-u user] [-i | -s] [--] [NAME=value ...] [command [arg ...]]
       sudo -v | -k | -h | -V

The sandbox's sudo: the sandbox's `user` runs commands as root (or as -u names), never asked
for a password. -E keeps the environment, -i runs the account's login shell (in its home),
-s its shell; -n, -S and -H change nothing here.
"""
_NO_ARGUMENT = {
    "-E": "preserve_env",
    "--preserve-env": "preserve_env",
    "-H": "",
    "--set-home": "",
    "-n": "",
    "--non-interactive": "",
    "-S": "",
    "--stdin": "",
    "-k": "reset",
    "--reset-timestamp": "reset",
    "-i": "login",
    "--login": "login",
    "-s": "shell",
    "--shell": "shell",
    "-v": "validate",
    "--validate": "validate",
    "-h": "help",
    "--help": "help",
    "-V": "version",
    "--version": "version",
}
"""Options without an argument, by the setting each turns on ('' for none)."""
_WITH_ARGUMENT = {"-u": "user", "--user": "user"}


class Refused(Exception):
    """A command line this sudo does not take."""


def parse(args: list[str]) -> tuple[dict[str, object], list[str], list[str]]:
    """The settings and the command of sudo's arguments (Refused for one it does not take)."""
    settings: dict[str, object] = {"user": "root", "keep": []}
    at = 0
    while at < len(args) and args[at].startswith("-") and args[at] != "-":
        arg = args[at]
        at += 1
        if arg == "--":
            break
        if arg.startswith("--"):
            name, equals, value = arg.partition("=")
            if name == "--preserve-env" and equals:
                settings["keep"] = [*_keep(settings), *(v for v in value.split(",") if v)]
                continue
            at = _option(settings, name, value if equals else None, args, at)
            continue
        letters = arg[1:]
        while letters:
            name, letters = "-" + letters[0], letters[1:]
            if name in _WITH_ARGUMENT:
                at = _option(settings, name, letters or None, args, at)
                break
            _option(settings, name, None, args, at)
    assignments = []
    while at < len(args) and "=" in args[at] and args[at].split("=", 1)[0].isidentifier():
        assignments.append(args[at])
        at += 1
    if settings.get("login") and settings.get("shell"):
        raise Refused("sudo: -i and -s cannot be used together")
    return settings, assignments, args[at:]


def _option(
    settings: dict[str, object], name: str, value: str | None, args: list[str], at: int
) -> int:
    """Record option `name` (with `value`, if given inline); where the arguments go on."""
    if name in _WITH_ARGUMENT:
        if value is None:
            if at >= len(args):
                raise Refused(f"sudo: option {name} needs an argument")
            value, at = args[at], at + 1
        settings[_WITH_ARGUMENT[name]] = value
    elif name in _NO_ARGUMENT and value is None:
        if _NO_ARGUMENT[name]:
            settings[_NO_ARGUMENT[name]] = True
    else:
        raise Refused(f"sudo: option {name} is not supported by this sandbox's sudo (see sudo -h)")
    return at


def account(name: str) -> pwd.struct_passwd:
    """The passwd entry of `name` (or of `#uid`)."""
    try:
        if name.startswith("#") and name[1:].isdigit():
            return pwd.getpwuid(int(name[1:]))
        return pwd.getpwnam(name)
    except KeyError:
        raise Refused(f"sudo: unknown user {name}") from None


def _keep(settings: dict[str, object]) -> list[str]:
    kept = settings["keep"]
    return kept if isinstance(kept, list) else []


def _quoted(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


def request(
    settings: dict[str, object],
    assignments: list[str],
    command: list[str],
    caller: pwd.struct_passwd,
    environ: Mapping[str, str],
    cwd: str,
) -> bytes:
    """(argv, env, cwd) of the command to run as `settings['user']` for the account `caller`."""
    target = account(str(settings["user"]))
    shell = target.pw_shell or "/bin/sh"
    if settings.get("shell"):
        shell = environ.get("SHELL") or shell
    if settings.get("login") or settings.get("shell"):
        argv = [shell, "-l"] if settings.get("login") else [shell]
        if command:
            argv += ["-c", " ".join(_quoted(arg) for arg in command)]
    elif command:
        argv = list(command)
    else:
        raise Refused(_USAGE.splitlines()[0])
    if settings.get("preserve_env"):
        env = dict(environ)
    else:
        kept = {*_KEPT, *_keep(settings)}
        env = {k: v for k, v in environ.items() if k in kept or k.startswith("LC_")}
        env.update(
            HOME=target.pw_dir or "/",
            SHELL=shell,
            USER=target.pw_name,
            LOGNAME=target.pw_name,
            MAIL=f"/var/mail/{target.pw_name}",
        )
    env.update(
        SUDO_USER=caller.pw_name,
        SUDO_UID=str(caller.pw_uid),
        SUDO_GID=str(caller.pw_gid),
        SUDO_COMMAND=" ".join(argv)[:4096],
    )
    env.update(assignment.partition("=")[::2] for assignment in assignments)
    if settings.get("login"):
        cwd = target.pw_dir or "/"
    fields = [target.pw_name, str(target.pw_uid), str(target.pw_gid), cwd, str(len(argv))]
    fields += argv + [f"{k}={v}" for k, v in env.items()]
    return b"\0".join(os.fsencode(field) for field in fields)


def run(data: bytes) -> int:
    """Have PID 1 run the request `data` with this process's stdin, stdout and stderr; the
    exit it reports (or Refused with why it would not)."""
    memfd = os.memfd_create("sudo", os.MFD_CLOEXEC)
    os.write(memfd, data)
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    try:
        try:
            sock.connect(SOCKET)
        except OSError as ex:
            why = f"sudo: cannot reach the sandbox's init at {SOCKET}: {ex.strerror}"
            raise Refused(why) from None
        # a signal that comes before the request is sent waits for it
        pending: list[int] = []
        for sig in _FORWARDED:
            signal.signal(sig, lambda number, _: pending.append(number))
        # PID 1 says `go` first, or why not (and a request it never read would make its
        # close a reset, losing why)
        message = sock.recv(4096).decode(errors="replace")
        if message != "go":
            raise Refused("sudo: " + _why(message))
        fds = struct.pack("4i", memfd, *map(_open, (0, 1, 2)))
        size = _terminal_size()
        asked = b"sudo" if size is None else b"sudo tty %d %d" % size
        sock.sendmsg([asked], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
        os.close(memfd)
        for sig in _FORWARDED:
            signal.signal(sig, lambda number, _: _forward(sock, number))
        for number in pending:
            _forward(sock, number)
        message = _answer(sock)
    finally:
        sock.close()
    if message.startswith("exit "):
        return int(message.split()[1])
    raise Refused("sudo: " + _why(message))


def _terminal_size() -> tuple[int, int] | None:
    """The rows and columns of sudo's terminal, if it runs in the foreground of one."""
    if not all(os.isatty(fd) for fd in (0, 1, 2)):
        return None
    try:
        if os.tcgetpgrp(0) != os.getpgrp():
            return None
    except OSError:
        return None
    columns, rows = os.get_terminal_size(0)
    return rows, columns


def _answer(sock: _socket.socket) -> str:
    """PID 1's last message: at once, or after relaying to the command's terminal if PID 1
    hands one over first."""
    data, ancillary, _, _ = sock.recvmsg(4096, _socket.CMSG_SPACE(4))
    message = data.decode(errors="replace")
    if message != "tty":
        return message
    (controller,) = struct.unpack("i", ancillary[0][2][:4])
    return _relay(sock, controller)


def _relay(sock: _socket.socket, controller: int) -> str:
    """Relay between sudo's terminal and the command's (`controller`) until the command has
    ended and what it showed is passed on; PID 1's last message."""
    # only on a terminal: imported at the top, they would slow every sudo's start
    import fcntl
    import select
    import termios
    import tty

    def resized(*_: object) -> None:
        try:
            size = fcntl.ioctl(0, termios.TIOCGWINSZ, b"\0" * 8)
            fcntl.ioctl(controller, termios.TIOCSWINSZ, size)
        except OSError:
            return  # no terminal any more: no size to pass on

    os.set_blocking(controller, False)
    poller = select.poll()
    for fd in (0, controller, sock.fileno()):
        poller.register(fd, select.POLLIN)
    typed = bytearray()  # what the command's terminal has not taken yet
    message: str | None = None
    shown = False  # whether every process has closed the command's terminal
    saved = termios.tcgetattr(0)
    tty.setraw(0, termios.TCSANOW)  # not TCSAFLUSH: what was typed ahead is kept
    signal.signal(signal.SIGWINCH, resized)
    try:
        while message is None or not shown:
            # once the command has ended, a process it left holding the terminal keeps it
            # open: what comes within a moment is passed on, then sudo ends
            events = poller.poll(None if message is None else _DRAINING_MS)
            if not events:
                break
            for fd, event in events:
                if fd == sock.fileno():
                    message = sock.recv(4096).decode(errors="replace")
                    poller.unregister(fd)
                elif fd == 0:
                    data = _read(0)
                    typed += data
                    if not data:
                        poller.unregister(0)
                elif event & ~select.POLLOUT and not _pass_on(controller):
                    poller.unregister(controller)
                    shown = True
            if not shown:
                del typed[: _write(controller, typed)]
                poller.modify(controller, select.POLLIN | (select.POLLOUT if typed else 0))
    finally:
        termios.tcsetattr(0, termios.TCSADRAIN, saved)
        os.close(controller)
    return message or ""


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # EIO: a terminal hung up
        return b""


def _pass_on(controller: int) -> bool:
    """Show what the command's terminal has on sudo's stdout; False when it is closed."""
    try:
        data = os.read(controller, 65536)
    except BlockingIOError:
        return True
    except OSError:  # EIO: every process has closed the command's terminal
        return False
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]
    return bool(data)


def _write(fd: int, data: bytearray) -> int:
    """Write what `fd` takes of `data` now; how much it took."""
    if not data:
        return 0
    try:
        return os.write(fd, data)
    except BlockingIOError:
        return 0


def _why(message: str) -> str:
    why = message[len("error: ") :] if message.startswith("error: ") else message
    return why or "the sandbox's init hung up"


def _open(fd: int) -> int:
    """`fd`, or /dev/null in its place if it is closed (as `sudo CMD <&-` leaves stdin)."""
    try:
        os.fstat(fd)
    except OSError:
        return os.open(os.devnull, os.O_RDWR)
    return fd


def _forward(sock: _socket.socket, number: int) -> None:
    try:
        sock.send(f"signal {number}".encode())
    except OSError:
        return  # the command has ended


def end(code: int) -> None:
    """End as the command ended: with its exit code, or by the signal that killed it."""
    if code < 0:
        sys.stdout.flush()
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # no handler of theirs to reset
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        code = 128 - code  # a signal that does not end a process
    os._exit(code)


def main() -> None:
    try:
        settings, assignments, command = parse(sys.argv[1:])
        if settings.get("help"):
            sys.stdout.write(_USAGE)
            return
        if settings.get("version"):
            sys.stdout.write("sudo of an inspect_swarm sandbox (no set-user-ID file)\n")
            return
        if settings.get("validate") or (settings.get("reset") and not command):
            return  # nothing to validate or forget: no password is ever asked
        try:
            cwd = os.getcwd()
        except OSError:
            cwd = "/"
        caller = account(f"#{os.getuid()}")
        data = request(settings, assignments, command, caller, os.environ, cwd)
        end(run(data))
    except Refused as ex:
        sys.stderr.write(f"{ex}\n")
        sys.exit(1)


if __name__ == "__main__":
    main()
