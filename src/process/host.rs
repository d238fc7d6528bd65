//! Keeps one contained host per thread: PID 1 of its own PID namespace, running the commands it
//! is sent, so a call pays for one fork instead of a new namespace and a new host.
//!
//! The host is a program that calls [`serve_host_if_asked`] first thing in its `main` (the
//! `kleene` binary does), named by [`contain_commands_with`] and started as `PROGRAM
//! __contained-host` with a socket as its stdin, by a thread of kleene's that made a new PID
//! namespace for the children it starts (`unshare(CLONE_NEWPID)`), so the host is that
//! namespace's init. A user who may not make a PID namespace (anyone but root, on most
//! machines) gets one inside a user namespace that maps them to themselves, so files keep their
//! owner: the program is started as `PROGRAM __contained-host user-namespace KLEENE_PID`, makes
//! both namespaces (a process must be alone to enter a user namespace, which kleene's threads
//! are not) and starts the host in them. No other program is needed. The host answers one
//! request at a time: it runs the command with [`crate::runner`]'s own process-group logic and
//! then, because it is the namespace's init, kills and reaps every process left in the
//! namespace (`setsid` children included) before it answers. Where kleene's own thread made the
//! namespace (root may enter it), no command is sent at all: the thread that runs one enters
//! the namespace for the start alone (`setns`, and back at once), so the command is that
//! thread's child inside the namespace and a call costs no exchange with the host. Once the
//! command's leader is gone, whatever it left running is the init's child (every orphan's
//! parent there), so the host's list of children tells whether anything else runs: only then
//! is it asked to sweep. When kleene dies, even by
//! SIGKILL, the host's parent-death signal takes it, and the kernel takes every process of the
//! namespace with it; a kleene that died before that signal was set leaves the host a closed
//! socket, on which it ends.
//!
//! ```text
//! kleene ──socket── host (PID 1) ──fork── sh -c COMMAND …        (a user namespace of its own)
//! kleene ──setns, fork── sh -c COMMAND …   host (PID 1): sweeps    (root)
//! ```
//!
//! Where no PID namespace can be made and no cgroup is writable, the same program is started
//! directly as `PROGRAM __contained-host reaper KLEENE_PID`: it makes itself a child
//! subreaper under a parent-death SIGTERM, so whatever a command left running becomes its
//! child when its parent ends, and it kills and reaps its children until none is left before
//! it answers; on SIGTERM (kleene died, or stops it) it stops its command and does the same.
//!
//! A thread's host outlives the thread (it lives as long as its keeper, the thread of kleene's
//! that started it): when the thread ends the host goes back to the spares, for the next
//! thread to take. As a host is stopped it is handed, over its socket, the inotify instances
//! kleene's stages leave unclosed (see [`crate::fs::unclosed`]), so the host's exit, not
//! kleene's, waits for the kernel to free their watches.
//!
//! The wire between kleene and its host is private to one build of the binary: frames of a
//! little-endian `u32` length and a JSON body, the request's stdin bytes in a frame of their
//! own. A host that does not answer with its protocol line as PID 1 is not used: kleene falls
//! back to process groups and says so.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, mpsc};
use std::time::{Duration, Instant};

use crate::closure::verdict::{OutputTail, TailLimits};
use crate::fs::unclosed;
use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sched::{CloneFlags, setns, unshare};
use nix::sys::prctl;
use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getgid, getpid, getppid, getuid};
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
use serde::{Deserialize, Serialize};

use super::sandbox::SandboxWire;
use super::{Finished, GroupRecords, Interrupt, Invocation, Place, RunError, run_here};

/// The argument that makes a program serve as a host instead of parsing a command line.
const HOST_ARG: &str = "__contained-host";

/// The argument after [`HOST_ARG`] that makes the host a subreaper; kleene's pid follows.
const REAPER_ARG: &str = "reaper";

/// The argument after [`HOST_ARG`] that makes the program enter a user namespace of its own
/// with a PID namespace inside, and start the host there; kleene's pid follows.
const USER_NAMESPACE_ARG: &str = "user-namespace";

/// How long past a command's grace a subreaper host has to stop when asked, before it is
/// killed.
const REAPER_GRACE: Duration = Duration::from_secs(1);

/// The first frame every host sends; another build's host is refused.
const PROTOCOL: &str = concat!("kleene-contained-host/", env!("CARGO_PKG_VERSION"), "/2");

/// The largest JSON frame either side accepts. Requests are a command line and a path; answers
/// hold an output tail, which its limits keep far smaller.
const MAX_FRAME: u32 = 16 << 20;

/// The largest stdin a command may be handed through the host.
const MAX_STDIN: u32 = 256 << 20;

/// How long a starting host has to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// How long past a command's own timeout kleene waits for the host's answer before it gives
/// up on the host (the host enforces the timeout itself; this catches a wedged host).
const BACKSTOP: Duration = Duration::from_secs(10);

/// How often a wait for an answer re-checks the interrupt flag.
const POLL: Duration = Duration::from_millis(25);

/// The program named to serve as the host.
static PROGRAM: OnceLock<PathBuf> = OnceLock::new();

/// Names `program` as the host of every command this process runs: it must call
/// [`serve_host_if_asked`] before anything else in its `main` (a program's own path, from
/// [`std::env::current_exe`], is the usual choice). Whether a host works here is probed on
/// the first command; until then, and where it does not work, commands run in process groups.
/// Only the first name counts; returns whether `program` is the one in force.
pub fn contain_commands_with(program: impl Into<PathBuf>) -> bool {
    let program = program.into();
    PROGRAM.get_or_init(|| program.clone()) == &program
}

/// Serves as a contained host when this process was started as one, and returns the exit
/// code its `main` must return at once; `None` for an ordinary start. Call it first in the
/// `main` of the program given to [`contain_commands_with`].
///
/// ```no_run
/// fn main() -> std::process::ExitCode {
///     if let Some(exit) = kleene::process::serve_host_if_asked() {
///         return exit;
///     }
///     if let Ok(me) = std::env::current_exe() {
///         kleene::process::contain_commands_with(me);
///     }
///     // … run commands with kleene::process::run …
///     std::process::ExitCode::SUCCESS
/// }
/// ```
pub fn serve_host_if_asked() -> Option<ExitCode> {
    std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == HOST_ARG)
        .then(serve)
}

/// How a host that worked here is started: probed once per process (the probing thread keeps
/// the host it started).
struct Probe {
    program: PathBuf,
    how: How,
}

/// The two kinds of host.
enum How {
    /// The init of a PID namespace.
    Namespace {
        /// Whether the namespace needs a user namespace of its own: a user without the right
        /// to make a PID namespace may make one inside a user namespace that maps them to
        /// themselves.
        own_user: bool,
    },
    /// A child subreaper started directly: where no PID namespace can be made and no cgroup
    /// is writable (a container under the default seccomp profile).
    Reaper,
}

static PROBED: OnceLock<Option<Probe>> = OnceLock::new();

/// Whether a host may be the init of a PID namespace (off when the user asks for the
/// subreaper instead).
static NAMESPACES: AtomicBool = AtomicBool::new(true);

/// Turns PID-namespace hosts off for this process: a named host program then serves as a
/// child subreaper. Call before the first command runs.
pub(super) fn disable_namespaces() {
    NAMESPACES.store(false, Ordering::SeqCst);
}

fn probe() -> Option<&'static Probe> {
    // Not probed (and not cached) before a program is named.
    PROGRAM.get()?;
    PROBED.get_or_init(probe_host).as_ref()
}

/// The first kind of host worth trying here: a PID namespace (inside a user namespace of its
/// own for anyone but root), else (unless cgroups contain commands here) a subreaper.
fn first_guess(program: &Path) -> Option<Probe> {
    let how = if NAMESPACES.load(Ordering::SeqCst) {
        How::Namespace {
            own_user: !getuid().is_root(),
        }
    } else if super::cgroup::available() {
        return None;
    } else {
        How::Reaper
    };
    Some(Probe {
        program: program.to_owned(),
        how,
    })
}

fn probe_host() -> Option<Probe> {
    let program = PROGRAM.get()?.clone();
    let mut probe = first_guess(&program)?;
    // A host started early answers the probe: its start overlapped whatever the process did
    // since. The probing host is kept for the first thread that runs a command.
    let mut host = take_spare().or_else(|| Host::start(&probe).ok());
    if host.is_none()
        && let How::Namespace { own_user } = &mut probe.how
    {
        // Root without the right to make a PID namespace may still make a user namespace
        // (and a user without may be allowed one after all): try the other way.
        *own_user = !*own_user;
        host = Host::start(&probe).ok();
    }
    if host.is_none() && matches!(probe.how, How::Namespace { .. }) {
        // No namespace here: a cgroup per command, else a subreaper.
        if super::cgroup::available() {
            return None;
        }
        probe.how = How::Reaper;
        host = Host::start(&probe).ok();
    }
    SPARE
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Spare::Ready(host?));
    Some(probe)
}

/// A host started ahead of its first command, for any thread.
enum Spare {
    /// Not yet greeted.
    Starting(Starting),
    /// Greeted, idle.
    Ready(Host),
}

/// Hosts started ahead of the threads that will use them.
static SPARE: Mutex<Vec<Spare>> = Mutex::new(Vec::new());

/// A started host from the spares, greeted and alive, if one is.
fn take_spare() -> Option<Host> {
    loop {
        let spare = SPARE.lock().unwrap_or_else(PoisonError::into_inner).pop()?;
        let host = match spare {
            Spare::Ready(host) => host,
            Spare::Starting(starting) => match starting.greeted() {
                Ok(host) => host,
                Err(_) => continue,
            },
        };
        let mut host = host;
        // A spare that was killed, or whose program failed, is not handed out.
        if host.alive() {
            return Some(host);
        }
    }
}

/// Starts `count` hosts without waiting for them to answer, so that their start (a program's,
/// a millisecond or two) overlaps what the process does before its first
/// commands.
pub(super) fn start_early(count: usize) {
    let unprobed;
    let probe = match PROBED.get() {
        // Hosts do not work here.
        Some(None) => return,
        Some(Some(probe)) => probe,
        None => {
            let Some(guess) = PROGRAM.get().and_then(|p| first_guess(p)) else {
                return;
            };
            unprobed = guess;
            &unprobed
        }
    };
    let mut spare = SPARE.lock().unwrap_or_else(PoisonError::into_inner);
    for _ in spare.len()..count {
        match Host::spawn(probe) {
            Ok(starting) => spare.push(Spare::Starting(starting)),
            Err(_) => return,
        }
    }
}

/// Whether commands run in a host here, and which kind.
pub(super) fn kind() -> Option<super::Containment> {
    probe().map(|probe| match probe.how {
        How::Namespace { .. } => super::Containment::PidNamespace,
        How::Reaper => super::Containment::Subreaper,
    })
}

thread_local! {
    /// This thread's host: each thread that runs commands has its own, so commands of
    /// several threads run at once, each contained alone.
    static HOST: Held = const { Held(RefCell::new(None)) };
}

/// A thread's host, which goes back to the spares when the thread ends: another thread (the
/// next pass's, or the one that stops every host at the end) may take it, since a host lives
/// as long as its keeper, not as long as the thread that ran commands in it.
struct Held(RefCell<Option<Host>>);

/// The most hosts kept among the spares when their threads end; others stop with them.
const SPARE_MAX: usize = 8;

impl Drop for Held {
    fn drop(&mut self) {
        let Some(mut host) = self.0.get_mut().take() else {
            return;
        };
        // Idle, it runs nothing any record should name; the next thread records it where
        // its own commands are recorded (another state directory, maybe).
        if let Some(records) = host.recorded.take() {
            records.forget(host.group);
        }
        let mut spare = SPARE.lock().unwrap_or_else(PoisonError::into_inner);
        if spare.len() < SPARE_MAX {
            spare.push(Spare::Ready(host));
        }
    }
}

/// Runs `inv` in this thread's host, starting one if needed; `None` where no host works here.
pub(super) fn run(
    inv: &Invocation<'_>,
    interrupt: &Interrupt,
) -> Option<Result<Finished, RunError>> {
    let probe = probe()?;
    Some(HOST.with(|slot| {
        let mut slot = slot.0.borrow_mut();
        // A host that was killed while idle is replaced before anything is sent to it.
        let mut held = slot.take();
        if held.as_mut().is_some_and(|h| !h.alive()) {
            held = None;
        }
        let host = match held.or_else(take_spare) {
            Some(host) => host,
            None => Host::start(probe).map_err(|source| RunError::Spawn {
                command: inv.command.to_owned(),
                dir: inv.dir.to_owned(),
                source,
            })?,
        };
        let (kept, result) = host.run(inv, interrupt);
        *slot = kept;
        result
    }))
}

/// A running host and kleene's end of its socket.
struct Host {
    child: Child,
    socket: UnixStream,
    /// The thread that started the host, whose end the host's parent-death signal follows.
    _keeper: Keeper,
    /// The process group of the program kleene started (the host, or the one that made a user
    /// namespace for it), which kleene records from the host's first recorded call until the
    /// host stops.
    group: i32,
    /// Whether the host is a subreaper: its commands do not share its group, so it is
    /// stopped by a signal it answers by killing them, not by killing its group.
    reaper: bool,
    /// Where that group is recorded, once it is.
    recorded: Option<GroupRecords>,
    /// The host's namespace, where this process may start commands itself (root's namespace,
    /// made by kleene's own thread); `None` where the host starts them.
    entry: Option<Entry>,
}

/// A host that was started and has not said hello yet.
struct Starting {
    child: Child,
    socket: UnixStream,
    keeper: Keeper,
    group: i32,
    reaper: bool,
    /// Whether kleene's own thread made the host's namespace (root's), which kleene may enter.
    made_namespace: bool,
}

impl Starting {
    /// Kills the host before it was used (it ran nothing yet).
    fn stop(mut self) {
        let _ = killpg(Pid::from_raw(self.group), Signal::SIGKILL);
        let _ = self.child.wait();
    }

    /// Waits for the host's hello; a host that does not give the right one is killed.
    fn greeted(self) -> io::Result<Host> {
        let hello = (|| {
            self.socket.set_read_timeout(Some(HELLO_TIMEOUT))?;
            let hello: Hello = read_json(&mut &self.socket)?;
            self.socket.set_read_timeout(None)?;
            // A namespace's host is its init; a subreaper is the child kleene started, and
            // says it could become one.
            let expected = if self.reaper { self.group } else { 1 };
            if hello.protocol != PROTOCOL || hello.pid != expected || hello.reaper != self.reaper {
                return Err(io::Error::other(format!(
                    "the contained host spoke `{}` as pid {} (subreaper: {}), not `{PROTOCOL}` \
                     as pid {expected} (subreaper: {})",
                    hello.protocol, hello.pid, hello.reaper, self.reaper
                )));
            }
            Ok(())
        })();
        if let Err(err) = hello {
            self.stop();
            return Err(err);
        }
        // Only a namespace kleene's own thread made (so, root's) may be entered by kleene.
        let entry = if self.made_namespace {
            Entry::open(self.group)
        } else {
            None
        };
        Ok(Host {
            child: self.child,
            socket: self.socket,
            _keeper: self.keeper,
            group: self.group,
            reaper: self.reaper,
            recorded: None,
            entry,
        })
    }
}

impl Host {
    fn start(probe: &Probe) -> io::Result<Self> {
        Self::spawn(probe)?.greeted()
    }

    fn spawn(probe: &Probe) -> io::Result<Starting> {
        let (socket, theirs) = UnixStream::pair()?;
        let mut cmd = Command::new(&probe.program);
        cmd.arg(HOST_ARG);
        // The hosts that are not the init of a namespace kleene made check, once their
        // parent-death signal is set, that their parent is still this process (it may have
        // died in between).
        let checks_parent = match probe.how {
            How::Namespace { own_user: false } => None,
            How::Namespace { own_user: true } => Some(USER_NAMESPACE_ARG),
            How::Reaper => Some(REAPER_ARG),
        };
        if let Some(mode) = checks_parent {
            cmd.arg(mode).arg(std::process::id().to_string());
        }
        // The host must pin no directory a task may want to remove.
        cmd.current_dir("/")
            .process_group(0)
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Where the run's key lives is none of a command's business.
            .env_remove("KLEENE_SIGNING_KEY");
        // The command holds our copy of the host's end, and the keeper drops it at once, so
        // a host that dies says so.
        let made_namespace = matches!(probe.how, How::Namespace { own_user: false });
        let (child, keeper) = Keeper::spawn(cmd, made_namespace)?;
        let group = child.id().cast_signed();
        Ok(Starting {
            child,
            socket,
            keeper,
            group,
            reaper: matches!(probe.how, How::Reaper),
            made_namespace,
        })
    }

    /// Whether the host still runs (a parent-death signal may have ended it).
    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Whether the host is exiting or gone (it ends its namespace's processes first, then is
    /// reaped).
    fn exiting(&self) -> bool {
        super::runs_at(format!("/proc/{}/stat", self.group)) != Some(true)
    }

    /// Sends `inv`, waits for the answer; the host comes back unless it failed or was stopped.
    fn run(
        mut self,
        inv: &Invocation<'_>,
        interrupt: &Interrupt,
    ) -> (Option<Self>, Result<Finished, RunError>) {
        let command = inv.command.to_owned();
        let lost = |source: io::Error| RunError::Wait {
            command: command.clone(),
            source,
        };
        // The host outlives each call: its group is recorded once, not written and removed
        // around every call (about a fifth of a no-op call's own cost).
        if let (Some((records, label)), None) = (&inv.records, &self.recorded) {
            records.record(
                self.group,
                &format!("{label}: `{command}`, and the calls its host ran after it"),
            );
            self.recorded = Some((*records).clone());
        }
        if let Some(entry) = self.entry.take() {
            return self.run_entered(entry, inv, interrupt);
        }
        // The host starts the command as soon as it reads the request, so the request waits.
        if inv.hold.is_some_and(|hold| !hold()) {
            return (Some(self), Err(RunError::Withheld { command }));
        }
        let answer = self.exchange(inv, interrupt);
        let answer = match answer {
            Ok(answer) => answer,
            Err(Exchange::Interrupted) => {
                self.stop();
                return (None, Err(RunError::Interrupted { command }));
            }
            Err(Exchange::Backstop) => {
                self.stop();
                return (
                    None,
                    Err(RunError::TimedOut {
                        command,
                        timeout: inv.timeout,
                        tail: OutputTail::default(),
                    }),
                );
            }
            Err(Exchange::Io(err)) => {
                self.stop();
                return (None, Err(lost(err)));
            }
        };
        let result = match answer {
            // The host kills and reaps whatever its command left before it answers.
            Answer::Finished { code, signal, tail } => Ok(Finished {
                code,
                signal,
                tail,
                quiet: true,
                denials: Vec::new(),
            }),
            Answer::Spawn { errno, message } => Err(RunError::Spawn {
                command,
                dir: inv.dir.to_owned(),
                source: os_error(errno, message),
            }),
            Answer::NotFound { tail } => Err(RunError::NotFound { command, tail }),
            Answer::NotExecutable { tail } => Err(RunError::NotExecutable { command, tail }),
            Answer::TimedOut { tail } => Err(RunError::TimedOut {
                command,
                timeout: inv.timeout,
                tail,
            }),
            Answer::Wait { errno, message } => Err(lost(os_error(errno, message))),
            Answer::Swept => {
                self.stop();
                return (
                    None,
                    Err(lost(io::Error::other(
                        "the contained host answered a command with a sweep",
                    ))),
                );
            }
        };
        (Some(self), result)
    }

    /// Runs `inv` as this thread's child inside the host's namespace, then makes sure nothing
    /// it started still runs there: a call costs no exchange with the host unless the command
    /// left something behind.
    fn run_entered(
        mut self,
        entry: Entry,
        inv: &Invocation<'_>,
        interrupt: &Interrupt,
    ) -> (Option<Self>, Result<Finished, RunError>) {
        // The host's group is recorded: stopping it stops everything in its namespace.
        let here = Invocation {
            records: None,
            ..inv.clone()
        };
        let result = run_here(&here, interrupt, Place::Namespace(&entry));
        let leftovers = entry.leftovers();
        // Back in place before anything below hands the host on or stops it.
        self.entry = Some(entry);
        if interrupt.is_set() {
            self.stop();
            return (None, result);
        }
        // A host that ended took the command with it (the kernel ends a namespace by killing
        // everything in it as its init exits, and a namespace without an init starts
        // nothing): whatever the command's status says, it was not the command's own end.
        // Only those two ends need the look at the host's state.
        let suspect = matches!(
            &result,
            Ok(Finished {
                signal: Some(9),
                ..
            }) | Err(RunError::Spawn { .. })
        );
        let quiet = if !self.alive() || (suspect && self.exiting()) {
            Err(io::Error::other(
                "the contained host ended while the command ran",
            ))
        } else if leftovers {
            // The command's leader is gone (reaped, or never started), so whatever it started
            // and left running is the host's child now, the namespace's init being every
            // orphan's parent there: with none, nothing but the host runs in the namespace.
            match self.ask(&Ask::Sweep, None, Instant::now() + BACKSTOP, interrupt) {
                Ok(Answer::Swept) => Ok(()),
                Ok(_) => Err(io::Error::other(
                    "the contained host answered a sweep with something else",
                )),
                Err(Exchange::Io(err)) => Err(err),
                Err(Exchange::Interrupted | Exchange::Backstop) => Err(io::Error::other(
                    "the contained host did not finish sweeping its namespace",
                )),
            }
        } else {
            Ok(())
        };
        match quiet {
            Ok(()) => (Some(self), result),
            Err(source) => {
                self.stop();
                let lost = RunError::Wait {
                    command: inv.command.to_owned(),
                    source,
                };
                (None, result.and(Err(lost)))
            }
        }
    }

    fn exchange(
        &mut self,
        inv: &Invocation<'_>,
        interrupt: &Interrupt,
    ) -> Result<Answer, Exchange> {
        // The host works from `/`: a relative directory means one under kleene's own.
        let dir = std::path::absolute(inv.dir).map_err(Exchange::Io)?;
        let request = Request {
            command: inv.command.to_owned(),
            dir: dir.into_os_string().into_vec(),
            timeout_ms: u64::try_from(inv.timeout.as_millis()).unwrap_or(u64::MAX),
            stdin: inv.stdin.is_some(),
            env: inv
                .env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
            limits: inv.limits,
            sandbox: inv.sandbox.map(super::sandbox::Sandbox::to_wire),
        };
        if let Some(stdin) = inv.stdin
            && stdin.len() > MAX_STDIN as usize
        {
            return Err(Exchange::Io(io::Error::other(format!(
                "a command's stdin of {} bytes is over the {MAX_STDIN} bytes a contained command \
                 may be handed",
                stdin.len()
            ))));
        }
        let backstop = Instant::now() + inv.timeout + BACKSTOP;
        self.ask(&Ask::Run(request), inv.stdin, backstop, interrupt)
    }

    /// Sends `ask` (and `stdin`, in a frame of its own) and waits for the answer until
    /// `backstop`, or until an interrupt.
    fn ask(
        &mut self,
        ask: &Ask,
        stdin: Option<&[u8]>,
        backstop: Instant,
        interrupt: &Interrupt,
    ) -> Result<Answer, Exchange> {
        write_json(&mut self.socket, ask).map_err(Exchange::Io)?;
        if let Some(stdin) = stdin {
            write_frame(&mut self.socket, stdin).map_err(Exchange::Io)?;
        }
        loop {
            if interrupt.is_set() {
                return Err(Exchange::Interrupted);
            }
            if Instant::now() >= backstop {
                return Err(Exchange::Backstop);
            }
            let mut fds = [PollFd::new(self.socket.as_fd(), PollFlags::POLLIN)];
            let ms = u16::try_from(POLL.as_millis()).unwrap_or(u16::MAX);
            match poll(&mut fds, PollTimeout::from(ms)) {
                Ok(0) | Err(Errno::EINTR) => continue,
                Ok(_) => break,
                Err(errno) => return Err(Exchange::Io(errno.into())),
            }
        }
        read_json(&mut self.socket).map_err(Exchange::Io)
    }

    /// Stops the host and everything it runs: a namespace's host with its group (the kernel
    /// takes the namespace with its init), a subreaper by SIGTERM, which it answers by
    /// stopping its command and killing whatever that left, then by SIGKILL if it takes
    /// longer than a command's grace.
    fn stop(mut self) {
        if self.reaper {
            let _ = kill(Pid::from_raw(self.group), Signal::SIGTERM);
            let until = Instant::now() + super::GRACE + REAPER_GRACE;
            while Instant::now() < until {
                if !self.alive() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = killpg(Pid::from_raw(self.group), Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if self.alive() {
            leave_unclosed_with(&self.socket);
        }
        // Closing the socket ends an idle host; a busy one goes with its group, or, as a
        // subreaper, stops its command first.
        let signal = if self.reaper {
            Signal::SIGTERM
        } else {
            Signal::SIGKILL
        };
        let _ = killpg(Pid::from_raw(self.group), signal);
        let _ = self.child.try_wait();
        if let Some(records) = self.recorded.take() {
            records.forget(self.group);
        }
    }
}

/// Leaves the descriptors whose close would wait (see [`crate::fs::unclosed`]) in flight to a
/// host that is stopped next: its end of the socket, never read again, holds them, and its
/// exit closes them, so nothing of kleene's waits for that. Where sending fails, they close
/// here as they would have.
fn leave_unclosed_with(socket: &UnixStream) {
    let kept = unclosed::take();
    if kept.is_empty() {
        return;
    }
    let fds: Vec<BorrowedFd<'_>> = kept.iter().map(AsFd::as_fd).collect();
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(unclosed::MAX))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if control.push(SendAncillaryMessage::ScmRights(&fds)) {
        let _ = sendmsg(
            socket,
            &[io::IoSlice::new(&[0])],
            &mut control,
            SendFlags::NOSIGNAL,
        );
    }
}

/// Stops the calling thread's host and every spare one, and removes their records.
pub(super) fn release() {
    let _ = HOST.try_with(|slot| slot.0.borrow_mut().take());
    let spares = std::mem::take(&mut *SPARE.lock().unwrap_or_else(PoisonError::into_inner));
    for spare in spares {
        // A greeted one goes when it is dropped.
        if let Spare::Starting(starting) = spare {
            starting.stop();
        }
    }
}

/// A thread of kleene's that started one host, as root after making a new PID namespace for the
/// children it starts, so the host is the namespace's init. The host's parent-death signal
/// follows the thread that started it, so the thread lives as long as the host is kept (a
/// host outlives the thread that ran commands in it, for the next one to take); dropping the
/// keeper ends it. (A process must be alone to enter a user namespace; a thread may make a
/// PID namespace for its own children, so no other program is needed.)
struct Keeper {
    _keep: mpsc::Sender<()>,
}

impl Keeper {
    fn spawn(mut cmd: Command, new_pid_namespace: bool) -> io::Result<(Child, Self)> {
        let (started_tx, started) = mpsc::sync_channel(1);
        let (keep, kept) = mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("kleene-host".to_owned())
            .spawn(move || {
                // The flag marks this thread only: no other thread's children, kleene's own
                // included, start in the namespace.
                let unshared = if new_pid_namespace {
                    unshare(CloneFlags::CLONE_NEWPID).map_err(io::Error::from)
                } else {
                    Ok(())
                };
                let child = unshared.and_then(|()| cmd.spawn());
                drop(cmd);
                let started = child.is_ok();
                if started_tx.send(child).is_ok() && started {
                    // Until the keeper is dropped: nothing is ever sent.
                    let _ = kept.recv();
                }
            })?;
        let child = started
            .recv()
            .map_err(|_| io::Error::other("the thread that starts the contained host ended"))??;
        Ok((child, Self { _keep: keep }))
    }
}

/// The PID namespace of a host kleene's own thread made, which this process may start commands
/// in itself: a thread enters it for one start and goes back to its own namespace at once (a
/// thread whose children start in another namespace may not start threads). Entering takes
/// the right to administer both namespaces, which root has and others do not.
pub(super) struct Entry {
    namespace: OwnedFd,
    /// The host's list of its children (`/proc/PID/task/PID/children`).
    children: PathBuf,
}

impl Entry {
    /// The namespace whose init is `host` (a pid in this process's namespace), where it can be
    /// entered and its init's children listed.
    fn open(host: i32) -> Option<Self> {
        let namespace = OwnedFd::from(std::fs::File::open(format!("/proc/{host}/ns/pid")).ok()?);
        let children = PathBuf::from(format!("/proc/{host}/task/{host}/children"));
        std::fs::metadata(&children).ok()?;
        let own = own_namespace()?;
        // Enter once and come back: where the right is missing, the host starts the commands.
        setns(&namespace, CloneFlags::CLONE_NEWPID).ok()?;
        setns(own, CloneFlags::CLONE_NEWPID).ok()?;
        Some(Self {
            namespace,
            children,
        })
    }

    /// Whether the namespace's init has a child: something a command started that outlived
    /// its leader (an unreadable list counts as one).
    fn leftovers(&self) -> bool {
        std::fs::read(&self.children)
            .map_or(true, |list| list.iter().any(|b| !b.is_ascii_whitespace()))
    }

    /// Starts `cmd` in the namespace.
    pub(super) fn spawn(&self, cmd: &mut Command) -> io::Result<Child> {
        let own = own_namespace()
            .ok_or_else(|| io::Error::other("this process's own PID namespace cannot be opened"))?;
        setns(&self.namespace, CloneFlags::CLONE_NEWPID)?;
        let child = cmd.spawn();
        if let Err(errno) = setns(own, CloneFlags::CLONE_NEWPID) {
            // Never seen: the same right entered. Nothing may run that kleene cannot judge.
            if let Ok(mut child) = child {
                let _ = child.kill();
                let _ = child.wait();
            }
            return Err(errno.into());
        }
        child
    }
}

/// This process's own PID namespace, which every thread goes back to after a start.
fn own_namespace() -> Option<&'static OwnedFd> {
    static OWN: OnceLock<Option<OwnedFd>> = OnceLock::new();
    OWN.get_or_init(|| {
        std::fs::File::open("/proc/self/ns/pid")
            .ok()
            .map(OwnedFd::from)
    })
    .as_ref()
}

enum Exchange {
    Interrupted,
    Backstop,
    Io(io::Error),
}

#[derive(Serialize, Deserialize)]
struct Hello {
    protocol: String,
    pid: i32,
    /// Whether the host became a subreaper that can list its children.
    reaper: bool,
}

/// What kleene asks of its host.
#[derive(Serialize, Deserialize)]
enum Ask {
    /// Run a command, then sweep the namespace.
    Run(Request),
    /// Sweep the namespace: what a command kleene started itself in it left behind.
    Sweep,
}

#[derive(Serialize, Deserialize)]
struct Request {
    command: String,
    /// The directory's bytes: a state directory's path need not be UTF-8.
    dir: Vec<u8>,
    timeout_ms: u64,
    /// Whether a frame of stdin bytes follows.
    stdin: bool,
    env: Vec<(String, String)>,
    limits: TailLimits,
    /// What the command may touch, when it is confined.
    #[serde(default)]
    sandbox: Option<SandboxWire>,
}

#[derive(Serialize, Deserialize)]
enum Answer {
    Finished {
        code: Option<i32>,
        signal: Option<i32>,
        tail: OutputTail,
    },
    Spawn {
        errno: Option<i32>,
        message: String,
    },
    NotFound {
        tail: OutputTail,
    },
    NotExecutable {
        tail: OutputTail,
    },
    TimedOut {
        tail: OutputTail,
    },
    Wait {
        errno: Option<i32>,
        message: String,
    },
    /// Nothing runs in the namespace but the host.
    Swept,
}

fn os_error(errno: Option<i32>, message: String) -> io::Error {
    errno.map_or_else(|| io::Error::other(message), io::Error::from_raw_os_error)
}

fn write_frame(to: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    let mut frame = Vec::with_capacity(4 + bytes.len());
    frame.extend_from_slice(&[0; 4]);
    frame.extend_from_slice(bytes);
    send_frame(to, frame)
}

/// Writes `frame`, a body behind four bytes of room for its length, with its length filled
/// in: one buffer, one write.
fn send_frame(to: &mut impl Write, mut frame: Vec<u8>) -> io::Result<()> {
    let len = u32::try_from(frame.len() - 4)
        .map_err(|_| io::Error::other("a frame for the contained host is over 4 GiB"))?;
    frame[..4].copy_from_slice(&len.to_le_bytes());
    to.write_all(&frame)?;
    to.flush()
}

/// The most bytes of a frame read into memory before more of it has arrived.
const READ_CHUNK: usize = 64 << 10;

/// Reads one frame of at most `max` bytes; memory grows with what arrives, not with what the
/// length field claims. A frame of up to [`READ_CHUNK`] bytes is one read after its length:
/// every call sends two such frames, so their reads are on every call's path.
fn read_frame(from: &mut impl Read, max: u32) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    from.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len);
    if len > max {
        return Err(io::Error::other(format!(
            "a frame from the other end of the contained host's socket claims {len} bytes, over \
             the {max} allowed"
        )));
    }
    let len = len as usize;
    let mut bytes = Vec::with_capacity(len.min(READ_CHUNK));
    while bytes.len() < len {
        let start = bytes.len();
        let end = len.min(start + READ_CHUNK);
        bytes.resize(end, 0);
        from.read_exact(&mut bytes[start..end])?;
    }
    Ok(bytes)
}

fn write_json(to: &mut impl Write, value: &impl Serialize) -> io::Result<()> {
    let mut frame = vec![0u8; 4];
    serde_json::to_writer(&mut frame, value)?;
    send_frame(to, frame)
}

fn read_json<T: for<'de> Deserialize<'de>>(from: &mut impl Read) -> io::Result<T> {
    Ok(serde_json::from_slice(&read_frame(from, MAX_FRAME)?)?)
}

/// Reads `bytes` as both ends of the socket read what arrives: kleene's end (a hello, then
/// answers) and the host's end (requests, each maybe followed by its stdin frame). Returns
/// how many frames each end decoded before the bytes ran out or a frame was refused.
#[cfg(feature = "testing")]
pub(crate) fn decode_both_ends(bytes: &[u8]) -> (usize, usize) {
    let mut kleene_end = bytes;
    let mut answers = 0;
    if read_json::<Hello>(&mut kleene_end).is_ok() {
        answers += 1;
        while read_json::<Answer>(&mut kleene_end).is_ok() {
            answers += 1;
        }
    }
    let mut host_end = bytes;
    let mut requests = 0;
    while let Ok(ask) = read_json::<Ask>(&mut host_end) {
        requests += 1;
        if let Ask::Run(request) = ask
            && request.stdin
            && read_frame(&mut host_end, MAX_STDIN).is_err()
        {
            break;
        }
    }
    (answers, requests)
}

/// The host's main: hello, then one answer per request until kleene closes the socket.
fn serve() -> ExitCode {
    // Inside its PID namespace the host contains every command already, and a subreaper is
    // only started where no cgroup is writable.
    super::cgroup::disable_cgroups();
    let mut args = std::env::args_os().skip(2);
    let (flag, parent) = (args.next(), args.next());
    let parent = parent.and_then(|p| p.to_str().and_then(|p| p.parse::<i32>().ok()));
    let served = match (flag, parent) {
        (Some(flag), Some(parent)) if flag == REAPER_ARG => serve_requests(Some(parent)),
        (Some(flag), Some(parent)) if flag == USER_NAMESPACE_ARG => {
            return host_in_own_user_namespace(parent);
        }
        // The init of a namespace kleene's thread made: it goes when that thread does (the
        // kernel delivers the signal from outside the namespace, which its init cannot
        // ignore). Had kleene died before this, its end of the socket is closed, and the
        // first read ends the host.
        (None, _) => prctl::set_pdeathsig(Signal::SIGKILL)
            .map_err(io::Error::from)
            .and_then(|()| serve_requests(None)),
        _ => Err(io::Error::other(
            "a contained host's arguments were not understood",
        )),
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::FAILURE,
    }
}

/// The first of two processes, where this user may not make a PID namespace alone: enters a
/// user namespace that maps the user to themselves (files keep their owner, and `id` says what
/// it says) with a PID namespace inside, starts the host as that namespace's init and waits
/// for it. It goes when kleene's thread that started it does, and the host goes with it.
fn host_in_own_user_namespace(parent: i32) -> ExitCode {
    let run = || -> io::Result<std::process::ExitStatus> {
        prctl::set_pdeathsig(Signal::SIGKILL)?;
        // The parent may have died before the signal was set: then it never comes.
        if getppid().as_raw() != parent {
            return Err(io::Error::other("kleene ended before its host started"));
        }
        let (uid, gid) = (getuid(), getgid());
        unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWPID)?;
        // An unprivileged map of groups needs `setgroups` denied first (kernels before 3.19
        // have no such file, and need nothing).
        match std::fs::write("/proc/self/setgroups", "deny") {
            Err(err) if err.kind() != io::ErrorKind::NotFound => return Err(err),
            _ => {}
        }
        std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
        std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
        // The same program (the file this process runs, even if its path names another by
        // now), from the same socket (stdin) in the same process group.
        let mut host = Command::new("/proc/self/exe");
        if let Some(name) = std::env::args_os().next() {
            host.arg0(name);
        }
        host.arg(HOST_ARG).status()
    };
    match run() {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    }
}

/// How a host makes sure nothing a command started outlives its answer.
enum Sweep {
    /// The namespace's init: kill everything in it.
    Namespace,
    /// A subreaper: kill its children until it has none.
    Reaper,
    /// Neither (a host kleene refuses).
    Nothing,
}

fn serve_requests(reaper_of: Option<i32>) -> io::Result<()> {
    let mut socket = UnixStream::from(io::stdin().as_fd().try_clone_to_owned()?);
    let pid = getpid().as_raw();
    // A subreaper's parent-death signal is SIGTERM, which stops the command it runs.
    let reaper = reaper_of.and_then(|parent| become_reaper(parent).ok());
    write_json(
        &mut socket,
        &Hello {
            protocol: PROTOCOL.to_owned(),
            pid,
            reaper: reaper.is_some(),
        },
    )?;
    // Only the namespace's init may sweep it: elsewhere `kill(-1)` would reach every process
    // of the user.
    let sweep = match (&reaper, pid) {
        (Some(_), _) => Sweep::Reaper,
        (None, 1) => Sweep::Namespace,
        (None, _) => Sweep::Nothing,
    };
    let interrupt = reaper.unwrap_or_default();
    loop {
        let ask: Ask = match read_json(&mut socket) {
            Ok(ask) => ask,
            Err(err) if err.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(err) => return Err(err),
        };
        let answer = match ask {
            Ask::Run(request) => run_request(request, &mut socket, &interrupt)?,
            Ask::Sweep => Answer::Swept,
        };
        match sweep {
            Sweep::Namespace => sweep_namespace(),
            Sweep::Reaper => reap_orphans(),
            Sweep::Nothing => {}
        }
        // Stopped (kleene died, or stops this host): nothing more is run.
        if interrupt.is_set() {
            return Ok(());
        }
        write_json(&mut socket, &answer)?;
    }
}

/// Makes this process a child subreaper under a parent-death signal from `parent`, and
/// returns the flag that signal sets. Fails where the kernel refuses either, where a
/// process's children cannot be listed, or when `parent` is already gone.
fn become_reaper(parent: i32) -> io::Result<Interrupt> {
    prctl::set_pdeathsig(Signal::SIGTERM)?;
    // The parent may have died before the signal was set: then it never comes.
    if getppid().as_raw() != parent {
        return Err(io::Error::other("kleene ended before its host started"));
    }
    prctl::set_child_subreaper(true)?;
    std::fs::metadata("/proc/thread-self/children")?;
    // Only a flag, never an exit on a second signal (what `Interrupt::install` does for a
    // person's Ctrl-C): when kleene dies its threads end one by one, the host is handed from
    // each to the next and the parent-death signal comes again each time; a host that exited
    // on the second would leave its command's children running.
    let interrupt = Interrupt::default();
    signal_hook::flag::register(signal_hook::consts::SIGTERM, Arc::clone(&interrupt.0))?;
    REAPING.store(true, Ordering::Relaxed);
    Ok(interrupt)
}

/// Runs the command `request` names, reading its stdin frame from `socket` first if it has
/// one.
fn run_request(
    request: Request,
    socket: &mut UnixStream,
    interrupt: &Interrupt,
) -> io::Result<Answer> {
    let stdin = if request.stdin {
        Some(read_frame(socket, MAX_STDIN)?)
    } else {
        None
    };
    let dir = PathBuf::from(std::ffi::OsString::from_vec(request.dir));
    let sandbox = request.sandbox.map(SandboxWire::into_sandbox);
    let inv = Invocation {
        command: &request.command,
        dir: &dir,
        timeout: Duration::from_millis(request.timeout_ms),
        stdin: stdin.as_deref(),
        env: request
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect(),
        limits: request.limits,
        records: None,
        // Whatever the command waited for, kleene waited for before it sent the request.
        hold: None,
        sandbox: sandbox.as_ref(),
    };
    Ok(answer(&inv, interrupt))
}

fn answer(inv: &Invocation<'_>, interrupt: &Interrupt) -> Answer {
    match run_here(inv, interrupt, Place::Host) {
        Ok(Finished {
            code, signal, tail, ..
        }) => Answer::Finished { code, signal, tail },
        Err(RunError::Spawn { source, .. }) => Answer::Spawn {
            errno: source.raw_os_error(),
            message: source.to_string(),
        },
        Err(RunError::Sandbox { source, .. }) => Answer::Spawn {
            errno: None,
            message: crate::text::Chain(&source).to_string(),
        },
        Err(RunError::NotFound { tail, .. }) => Answer::NotFound { tail },
        Err(RunError::NotExecutable { tail, .. }) => Answer::NotExecutable { tail },
        Err(RunError::TimedOut { tail, .. }) => Answer::TimedOut { tail },
        Err(RunError::Wait { source, .. }) => Answer::Wait {
            errno: source.raw_os_error(),
            message: source.to_string(),
        },
        // Only a subreaper's flag is ever set (kleene stops it, or died): no answer is sent.
        Err(RunError::Interrupted { .. }) => Answer::Wait {
            errno: None,
            message: "interrupted".to_owned(),
        },
        // A request holds nothing to wait for (kleene waited before it sent it).
        Err(RunError::Withheld { .. }) => Answer::Wait {
            errno: None,
            message: "withheld".to_owned(),
        },
    }
}

/// Kills every process left in the namespace and reaps them all, so nothing a command started
/// writes after its answer.
fn sweep_namespace() {
    loop {
        // Every process of the namespace descends from its init, and an orphan becomes the
        // init's child: with no child left (the usual case, the command's leader already
        // reaped) nothing else runs here, and the kill, which the kernel answers by walking
        // every process of the machine, is not needed.
        match waitpid(
            Pid::from_raw(-1),
            Some(WaitPidFlag::WNOHANG | WaitPidFlag::__WALL),
        ) {
            Err(Errno::ECHILD) => return,
            // Reaped one that had already ended: look again.
            Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) | Err(Errno::EINTR) => continue,
            Ok(_) => {}
            Err(_) => return,
        }
        let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
        // Orphans become the init's children as their parents die: wait until none is left.
        match waitpid(Pid::from_raw(-1), None) {
            Err(Errno::ECHILD) => return,
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => return,
        }
    }
}

/// A subreaper's sweep: kills and reaps its children until it has none. Everything a
/// command started that outlived its parent (a `setsid` child too) became this process's
/// child, and everything else descends from one of its children, so when none is left
/// nothing the command started runs.
pub(super) fn reap_orphans() {
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            // A living child: kill what is there, then wait for one to go.
            Ok(WaitStatus::StillAlive) => {}
            Ok(_) | Err(Errno::EINTR) => continue,
            // ECHILD: none left.
            Err(_) => return,
        }
        let children = own_children();
        if children.is_empty() {
            // Probed before the host was used; nothing to wait for that can be named.
            return;
        }
        for child in children {
            let _ = kill(child, Signal::SIGKILL);
        }
        let _ = waitpid(Pid::from_raw(-1), None);
    }
}

/// The children of every thread of this process, from `/proc`.
fn own_children() -> Vec<Pid> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut children = Vec::new();
    for task in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("children")) else {
            continue;
        };
        children.extend(
            text.split_ascii_whitespace()
                .filter_map(|pid| pid.parse().ok())
                .map(Pid::from_raw),
        );
    }
    children
}

/// Whether this process is a subreaper host (so a command's leftovers can be killed as soon
/// as its leader ends).
pub(super) fn reaping() -> bool {
    REAPING.load(Ordering::Relaxed)
}

/// Set once a host became a subreaper.
static REAPING: AtomicBool = AtomicBool::new(false);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_round_trips() {
        let mut wire = Vec::new();
        write_frame(&mut wire, b"hello").unwrap();
        assert_eq!(read_frame(&mut wire.as_slice(), 16).unwrap(), b"hello");
    }

    #[test]
    fn a_frame_of_several_chunks_round_trips_and_a_cut_in_its_last_chunk_is_an_end() {
        let body: Vec<u8> = (0..READ_CHUNK * 2 + 7).map(|i| i as u8).collect();
        let mut wire = Vec::new();
        write_frame(&mut wire, &body).unwrap();
        assert_eq!(read_frame(&mut wire.as_slice(), MAX_FRAME).unwrap(), body);
        wire.pop();
        let err = read_frame(&mut wire.as_slice(), MAX_FRAME).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn a_frame_over_its_bound_is_refused_before_anything_is_read() {
        let mut wire = u32::MAX.to_le_bytes().to_vec();
        wire.extend_from_slice(b"abc");
        let err = read_frame(&mut wire.as_slice(), MAX_FRAME).unwrap_err();
        assert!(err.to_string().contains("claims 4294967295 bytes"), "{err}");
    }

    #[test]
    fn a_truncated_frame_is_an_unexpected_end() {
        for cut in [0, 2, 4, 6] {
            let mut wire = Vec::new();
            write_frame(&mut wire, b"hello").unwrap();
            wire.truncate(cut);
            let err = read_frame(&mut wire.as_slice(), 16).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "cut at {cut}");
        }
    }

    #[test]
    fn an_answer_keeps_the_exit_and_the_tail() {
        let tail = OutputTail::capture(b"out\n", b"err\n", TailLimits::default());
        let mut wire = Vec::new();
        write_json(
            &mut wire,
            &Answer::Finished {
                code: Some(3),
                signal: None,
                tail: tail.clone(),
            },
        )
        .unwrap();
        match read_json(&mut wire.as_slice()).unwrap() {
            Answer::Finished {
                code, tail: got, ..
            } => {
                assert_eq!(code, Some(3));
                assert_eq!(got, tail);
            }
            _ => panic!("another answer"),
        }
    }
}
