//! Whether any process started while a command ran still runs, told from `/proc`.
//!
//! Where commands are contained by process groups only, a command may leave a process
//! running outside its group (one that called `setsid`), and the stage it ran in is then
//! not quiet. Every process a command starts takes its id from the kernel while the command
//! runs, and the kernel hands ids out in a cycle: so when the ids handed out between the
//! command's start and its end did not go round the whole cycle, they hold every process it
//! started, and none of those running proves that nothing it started runs. Processes that
//! other programs started in the same time count too: they can only make the answer "maybe
//! running", never hide a process of the command's.
//!
//! ```text
//! let window = StartWindow::open();        // before the command starts
//! // … the command runs, its leader is reaped, its group killed …
//! let quiet = window.is_some_and(|w| w.nothing_started_runs());
//! ```
//!
//! The proof assumes commands do not choose their own process ids (`clone3` with `set_tid`,
//! or writing `ns_last_pid`), which takes `CAP_SYS_ADMIN`. The look reads the kernel through
//! a small trait, so that its tests can drive it with a simulated kernel whose processes fork,
//! end and wrap the ids round while it looks, which no real machine does on demand.

use std::fs;
use std::io::ErrorKind;
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use super::StatusFields;

/// The kernel keeps ids below this for its own use once the ids wrap (in the first PID
/// namespace; in others ids restart lower, which only makes the bound below safer).
const RESERVED_IDS: u64 = 300;

/// Up to this many ids are looked up one by one; a wider window lists `/proc` instead.
const LOOKED_UP_ONE_BY_ONE: u32 = 64;

/// How long a process sent SIGKILL is given to become a zombie before it counts as running.
const DYING_GRACE: Duration = Duration::from_millis(100);

/// The kernel's counters when a command started.
#[derive(Debug, Clone, Copy)]
pub(super) struct StartWindow {
    /// The last id handed out before the command started.
    last_id: u32,
    /// Every process and thread the machine started since boot, then.
    forks: u64,
    /// The processes and threads that existed then, each an id the cycle skips.
    existing: u64,
}

impl StartWindow {
    /// Opens a window now, before a command starts; `None` where `/proc` cannot tell (not
    /// mounted, another PID namespace's, or hiding other users' processes).
    pub(super) fn open() -> Option<Self> {
        if !proc_tells_all() {
            return None;
        }
        Self::open_in(&mut Proc::new())
    }

    /// Whether no process started since the window opened still runs, once the command's
    /// leader is reaped and its group killed. A zombie counts as gone, and so does a process
    /// sent SIGKILL once it became one (given [`DYING_GRACE`]). False whenever it cannot be
    /// told: the ids wrapped, so many processes started that they may have gone round the
    /// whole cycle, ids kept being handed out while it looked, or `/proc` failed.
    pub(super) fn nothing_started_runs(&self) -> bool {
        self.nothing_started_runs_in(&mut Proc::new())
    }

    /// [`open`](Self::open) on what `kernel` reads.
    fn open_in(kernel: &mut impl Kernel) -> Option<Self> {
        let (last_id, existing) = kernel.last_handed_out()?;
        Some(Self {
            last_id,
            forks: kernel.forks()?,
            existing,
        })
    }

    /// [`nothing_started_runs`](Self::nothing_started_runs) on what `kernel` reads.
    fn nothing_started_runs_in(&self, kernel: &mut impl Kernel) -> bool {
        let Some(max) = kernel.id_max() else {
            return false;
        };
        let mut looked_up_to = self.last_id;
        // A process looked at and found running ends the look; one found gone starts nothing
        // after. So what a process started between the last reading of the counters and the
        // look at it is found by reading them again, until a reading finds no new id.
        for _ in 0..LOOKS {
            let Some((last_id, _)) = kernel.last_handed_out() else {
                return false;
            };
            if last_id < looked_up_to {
                return false;
            }
            if last_id == looked_up_to {
                // The cycle skips ids in use, at most those that existed plus those started
                // since: it went round once only if it moved past every other id. The forks
                // only grow, so their count now bounds every look before.
                let Some(forks) = kernel.forks() else {
                    return false;
                };
                let started = forks.saturating_sub(self.forks);
                let travel_bound = started
                    .saturating_mul(2)
                    .saturating_add(self.existing)
                    .saturating_add(RESERVED_IDS);
                return travel_bound < max;
            }
            let window = (looked_up_to, last_id);
            let Some(ids) = kernel.ids_within(window) else {
                return false;
            };
            let all_gone = ids.into_iter().all(|id| {
                loop {
                    match kernel.state_of(id) {
                        State::Gone => break true,
                        State::Runs => break false,
                        State::Dying if kernel.wait_a_moment() => {}
                        State::Dying => break false,
                    }
                }
            });
            if !all_gone {
                return false;
            }
            looked_up_to = last_id;
        }
        false
    }
}

/// How many times the counters are read before processes that keep starting leave the
/// answer unknown.
const LOOKS: usize = 8;

/// What the look reads of the kernel (from `/proc`, or a simulation in the tests).
trait Kernel {
    /// The last id handed out in this PID namespace, and the threads that exist.
    fn last_handed_out(&mut self) -> Option<(u32, u64)>;
    /// Every process and thread the machine started since boot.
    fn forks(&mut self) -> Option<u64>;
    /// One more than the highest id handed out.
    fn id_max(&mut self) -> Option<u64>;
    /// The ids handed out within `window` that may name a process.
    fn ids_within(&mut self, window: (u32, u32)) -> Option<Vec<u32>>;
    /// What became of the process or thread `id`.
    fn state_of(&mut self, id: u32) -> State;
    /// Waits a moment for a process sent SIGKILL to become a zombie; false once the grace
    /// is spent.
    fn wait_a_moment(&mut self) -> bool;
}

/// The kernel as `/proc` shows it.
struct Proc {
    /// When a process sent SIGKILL has had its grace.
    until: Instant,
}

impl Proc {
    fn new() -> Self {
        Self {
            until: Instant::now() + DYING_GRACE,
        }
    }
}

impl Kernel for Proc {
    fn last_handed_out(&mut self) -> Option<(u32, u64)> {
        last_handed_out()
    }

    fn forks(&mut self) -> Option<u64> {
        forks()
    }

    fn id_max(&mut self) -> Option<u64> {
        id_max()
    }

    fn ids_within(&mut self, window: (u32, u32)) -> Option<Vec<u32>> {
        ids_within(window)
    }

    fn state_of(&mut self, id: u32) -> State {
        state_of(id)
    }

    fn wait_a_moment(&mut self) -> bool {
        if Instant::now() >= self.until {
            return false;
        }
        thread::sleep(Duration::from_millis(1));
        true
    }
}

/// The ids handed out within `window` that may name a process: each one, for a narrow
/// window; those `/proc` lists (processes, not threads), for a wide one.
fn ids_within(window: (u32, u32)) -> Option<Vec<u32>> {
    let (after, last) = window;
    if last - after <= LOOKED_UP_ONE_BY_ONE {
        return Some((after + 1..=last).collect());
    }
    let entries = fs::read_dir("/proc").ok()?;
    Some(
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|id| within(window, *id))
            .collect(),
    )
}

/// Whether `id` was handed out within `window` (after its first id, up to its last).
fn within((after, last): (u32, u32), id: u32) -> bool {
    id > after && id <= last
}

/// What became of the process or thread with an id handed out in the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No such id, a zombie, or a thread (its process is looked at under its own id, or
    /// started before the window).
    Gone,
    /// Sent SIGKILL, not yet a zombie: it runs no code of its own again.
    Dying,
    /// Running, or it cannot be told.
    Runs,
}

fn state_of(id: u32) -> State {
    let status = match fs::read_to_string(format!("/proc/{id}/status")) {
        Ok(status) => status,
        Err(e) if e.kind() == ErrorKind::NotFound => return State::Gone,
        Err(_) => return State::Runs,
    };
    match StatusFields::of(&status) {
        Some(status) => what_became_of(&status, id, || {
            super::threads_run(&format!("/proc/{id}/task"))
        }),
        None => State::Runs,
    }
}

/// What became of the process or thread `id` whose status is `status`, where `threads_run`
/// says whether a thread of its process other than the first runs.
fn what_became_of(status: &StatusFields, id: u32, threads_run: impl FnOnce() -> bool) -> State {
    if status.process != id {
        // A thread: of a process started in the window, looked at under the process's id
        // (and its other threads with it), or of one started before, no command's.
        return State::Gone;
    }
    if status.zombie {
        // A first thread that ended while others of its process run shows as a zombie.
        return if threads_run() {
            State::Runs
        } else {
            State::Gone
        };
    }
    if status.killed {
        State::Dying
    } else {
        State::Runs
    }
}

/// The last id the kernel handed out in this PID namespace, and the threads that exist on
/// the machine (from `/proc/loadavg`).
fn last_handed_out() -> Option<(u32, u64)> {
    let loadavg = fs::read_to_string("/proc/loadavg").ok()?;
    let mut fields = loadavg.split_whitespace().skip(3);
    let existing = fields.next()?.split_once('/')?.1.parse().ok()?;
    let last_id = fields.next()?.parse().ok()?;
    Some((last_id, existing))
}

/// Every process and thread the machine started since boot (from `/proc/stat`).
fn forks() -> Option<u64> {
    let stat = fs::read_to_string("/proc/stat").ok()?;
    stat.lines()
        .find_map(|line| line.strip_prefix("processes "))?
        .trim()
        .parse()
        .ok()
}

/// One more than the highest id the kernel hands out.
fn id_max() -> Option<u64> {
    static MAX: OnceLock<Option<u64>> = OnceLock::new();
    *MAX.get_or_init(|| {
        fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()?
            .trim()
            .parse()
            .ok()
    })
}

/// Whether `/proc` shows this process's PID namespace, every user's processes in it.
fn proc_tells_all() -> bool {
    static TELLS: OnceLock<bool> = OnceLock::new();
    *TELLS.get_or_init(|| {
        let ours = fs::read_link("/proc/self")
            .ok()
            .is_some_and(|p| p.to_str() == Some(&std::process::id().to_string()));
        ours && fs::read_to_string("/proc/self/mountinfo")
            .is_ok_and(|mounts| !hides_processes(&mounts))
    })
}

/// Whether the `proc` mount at `/proc` in `mountinfo` hides processes (`hidepid`) or shows
/// them alone (`subset=pid` hides the counters).
fn hides_processes(mountinfo: &str) -> bool {
    mountinfo.lines().any(|line| {
        let mut halves = line.splitn(2, " - ");
        let (Some(mount), Some(source)) = (halves.next(), halves.next()) else {
            return false;
        };
        let at_proc = mount.split(' ').nth(4) == Some("/proc");
        let mut source = source.split(' ');
        let is_proc = source.next() == Some("proc");
        let options = source.nth(1).unwrap_or("");
        at_proc
            && is_proc
            && options.split(',').any(|o| {
                o.strip_prefix("hidepid=")
                    .is_some_and(|v| v != "0" && v != "off")
                    || o.starts_with("subset=")
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, VecDeque};
    use std::process::Command;

    use proptest::prelude::*;

    /// What happens on a simulated machine between two readings of its kernel.
    #[derive(Debug, Clone)]
    enum Event {
        /// The n-th running process of the command's (counted round) starts a child.
        CommandForks(usize),
        /// The n-th running process of the command's ends: a zombie until reaped.
        CommandEnds(usize),
        /// The n-th running process of the command's is sent SIGKILL.
        CommandKilled(usize),
        /// The n-th process sent SIGKILL becomes a zombie.
        Dies(usize),
        /// The n-th zombie is reaped: its id is free again.
        Reaped(usize),
        /// Another program starts a process, which runs on or ends at once.
        OtherStarts {
            runs: bool,
        },
        /// Other programs start this many processes that end and are reaped at once: the ids
        /// move on, nothing is left.
        Burst(u32),
        Nothing,
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            3 => (0..8usize).prop_map(Event::CommandForks),
            2 => (0..8usize).prop_map(Event::CommandEnds),
            1 => (0..8usize).prop_map(Event::CommandKilled),
            2 => (0..8usize).prop_map(Event::Dies),
            2 => (0..8usize).prop_map(Event::Reaped),
            2 => any::<bool>().prop_map(|runs| Event::OtherStarts { runs }),
            1 => (1..80u32).prop_map(Event::Burst),
            2 => Just(Event::Nothing),
        ]
    }

    /// A process of the simulated machine.
    #[derive(Debug, Clone, Copy)]
    struct Simulated {
        state: State,
        /// Started by the command (after the window opened).
        commands: bool,
    }

    /// A kernel that hands ids out in a cycle, with one scripted event before each reading
    /// the look makes: processes fork, end, are killed and reaped while it looks.
    #[derive(Debug)]
    struct Sim {
        /// Where ids start again after the highest.
        min: u32,
        /// One more than the highest id.
        max: u32,
        /// The last id handed out.
        cursor: u32,
        forks: u64,
        processes: BTreeMap<u32, Simulated>,
        events: VecDeque<Event>,
        waits: u32,
    }

    impl Sim {
        /// Hands out the next free id after the last, round the cycle.
        fn start(&mut self, simulated: Simulated) -> Option<u32> {
            let span = self.max - self.min;
            let id = (1..=span)
                .map(|step| self.min + (self.cursor - self.min + step) % span)
                .find(|id| !self.processes.contains_key(id))?;
            self.cursor = id;
            self.forks += 1;
            self.processes.insert(id, simulated);
            Some(id)
        }

        fn nth(&self, n: usize, wanted: impl Fn(&Simulated) -> bool) -> Option<u32> {
            let ids: Vec<u32> = self
                .processes
                .iter()
                .filter(|(_, p)| wanted(p))
                .map(|(id, _)| *id)
                .collect();
            (!ids.is_empty()).then(|| ids[n % ids.len()])
        }

        fn apply(&mut self, event: Event) {
            let running = |p: &Simulated| p.commands && p.state == State::Runs;
            let set = |sim: &mut Self, id: Option<u32>, state| {
                if let Some(p) = id.and_then(|id| sim.processes.get_mut(&id)) {
                    p.state = state;
                }
            };
            match event {
                Event::CommandForks(n) => {
                    if self.nth(n, running).is_some() {
                        self.start(Simulated {
                            state: State::Runs,
                            commands: true,
                        });
                    }
                }
                Event::CommandEnds(n) => set(self, self.nth(n, running), State::Gone),
                Event::CommandKilled(n) => set(self, self.nth(n, running), State::Dying),
                Event::Dies(n) => set(self, self.nth(n, |p| p.state == State::Dying), State::Gone),
                Event::Reaped(n) => {
                    if let Some(id) = self.nth(n, |p| p.state == State::Gone) {
                        self.processes.remove(&id);
                    }
                }
                Event::OtherStarts { runs } => {
                    self.start(Simulated {
                        state: if runs { State::Runs } else { State::Gone },
                        commands: false,
                    });
                }
                Event::Burst(count) => {
                    for _ in 0..count {
                        let ended = Simulated {
                            state: State::Gone,
                            commands: false,
                        };
                        if let Some(id) = self.start(ended) {
                            self.processes.remove(&id);
                        }
                    }
                }
                Event::Nothing => {}
            }
        }

        fn step(&mut self) {
            if let Some(event) = self.events.pop_front() {
                self.apply(event);
            }
        }

        /// Whether a process the command started still runs (or may: sent SIGKILL only).
        fn command_runs(&self) -> bool {
            self.processes
                .values()
                .any(|p| p.commands && p.state != State::Gone)
        }
    }

    impl Kernel for Sim {
        fn last_handed_out(&mut self) -> Option<(u32, u64)> {
            self.step();
            Some((self.cursor, self.processes.len() as u64))
        }

        fn forks(&mut self) -> Option<u64> {
            self.step();
            Some(self.forks)
        }

        fn id_max(&mut self) -> Option<u64> {
            Some(u64::from(self.max))
        }

        fn ids_within(&mut self, (after, last): (u32, u32)) -> Option<Vec<u32>> {
            self.step();
            Some((after + 1..=last).collect())
        }

        fn state_of(&mut self, id: u32) -> State {
            self.step();
            self.processes.get(&id).map_or(State::Gone, |p| p.state)
        }

        fn wait_a_moment(&mut self) -> bool {
            self.step();
            self.waits += 1;
            self.waits < 100
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// For every machine (ids restarting at 1 or at 300, a cycle of 20 to 140 ids, any
        /// last id, other processes running), every command (forking, ending, killed, its
        /// processes forking while kleene looks) and every other program starting processes
        /// meanwhile: when the look says nothing the command started runs, nothing it started
        /// runs.
        #[test]
        fn the_look_never_says_quiet_while_a_process_of_the_command_runs(
            restart_at_one in any::<bool>(),
            span in 20u32..140,
            last in 0u32..140,
            others in 0usize..12,
            during in proptest::collection::vec(event(), 0..24),
            while_looking in proptest::collection::vec(event(), 0..48),
        ) {
            let max = RESERVED_IDS as u32 + span;
            let min = if restart_at_one { 1 } else { RESERVED_IDS as u32 };
            let mut sim = Sim {
                min,
                max,
                cursor: min + last % (max - min),
                forks: 1_000,
                processes: BTreeMap::new(),
                events: VecDeque::new(),
                waits: 0,
            };
            for _ in 0..others {
                sim.start(Simulated { state: State::Runs, commands: false });
            }
            let window = StartWindow::open_in(&mut sim).unwrap();
            // The command's leader, what happens while it runs, then its end: kleene reaps it.
            let leader = sim.start(Simulated { state: State::Runs, commands: true });
            for event in during {
                sim.apply(event);
            }
            if let Some(leader) = leader {
                sim.processes.remove(&leader);
            }
            sim.events = while_looking.into();
            let quiet = window.nothing_started_runs_in(&mut sim);
            prop_assert!(!(quiet && sim.command_runs()), "{sim:?}");
        }
    }

    #[test]
    fn a_quiet_machine_is_told_quiet_and_one_the_command_left_a_process_on_is_not() {
        let sim = |events: Vec<Event>| Sim {
            min: 1,
            max: 400,
            cursor: 17,
            forks: 0,
            processes: BTreeMap::new(),
            events: events.into(),
            waits: 0,
        };
        let command = Simulated {
            state: State::Runs,
            commands: true,
        };
        // The leader alone, reaped.
        let mut quiet = sim(Vec::new());
        let window = StartWindow::open_in(&mut quiet).unwrap();
        let leader = quiet.start(command).unwrap();
        quiet.processes.remove(&leader);
        assert!(window.nothing_started_runs_in(&mut quiet));
        // A child that outlives the leader.
        let mut left = sim(Vec::new());
        let window = StartWindow::open_in(&mut left).unwrap();
        let leader = left.start(command).unwrap();
        left.start(command).unwrap();
        left.processes.remove(&leader);
        assert!(!window.nothing_started_runs_in(&mut left));
        // A child killed as the group is, which becomes a zombie while kleene waits for it.
        let mut killed = sim(vec![Event::Nothing, Event::Nothing, Event::Dies(0)]);
        let window = StartWindow::open_in(&mut killed).unwrap();
        let leader = killed.start(command).unwrap();
        killed.start(Simulated {
            state: State::Dying,
            commands: true,
        });
        killed.processes.remove(&leader);
        assert!(window.nothing_started_runs_in(&mut killed));
    }

    #[test]
    fn ids_that_went_round_the_whole_cycle_leave_the_look_unsure() {
        // Ids 300 to 319: the window opens at 305, the command's leader takes 306 and its
        // child 307; other programs then take eighteen ids, round the cycle back to 305. The
        // last id handed out is the window's first again, though the child still runs.
        let mut sim = Sim {
            min: 300,
            max: 320,
            cursor: 305,
            forks: 0,
            processes: BTreeMap::new(),
            events: VecDeque::new(),
            waits: 0,
        };
        let window = StartWindow::open_in(&mut sim).unwrap();
        let command = Simulated {
            state: State::Runs,
            commands: true,
        };
        let leader = sim.start(command).unwrap();
        sim.start(command).unwrap();
        sim.apply(Event::Burst(18));
        sim.processes.remove(&leader);
        assert_eq!(sim.cursor, 305);
        assert!(sim.command_runs());
        assert!(!window.nothing_started_runs_in(&mut sim));
    }

    /// A window opened now, or `None` (said) where `/proc` cannot tell.
    fn window() -> Option<StartWindow> {
        let window = StartWindow::open();
        if window.is_none() {
            eprintln!("skipped: /proc does not tell here");
        }
        window
    }

    /// A child killed and reaped however the test ends.
    struct Sleeping(std::process::Child);

    impl Sleeping {
        fn start() -> Self {
            Self(Command::new("sleep").arg("30").spawn().unwrap())
        }
    }

    impl Drop for Sleeping {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// Set in the environment of this test binary run again in a PID namespace of its own.
    const IN_OWN_NAMESPACE: &str = "KLEENE_TEST_IN_OWN_PID_NAMESPACE";

    /// Runs the test `name` of this module again, in this test binary inside a PID namespace
    /// with its own `/proc`, where only the test's own processes take ids, and asserts that
    /// it passed there; says it skips where no such namespace can be made. The test binary is
    /// the namespace's init there, which changes nothing for a test that reaps its children.
    fn run_in_own_namespace(name: &str) {
        // Plainly where this user may (root, as in CI), else in a user namespace of its own;
        // `--kill-child` ends the namespace with `unshare` should the test be killed.
        let tried: [&[&str]; 2] = [
            &["--pid", "--fork", "--kill-child", "--mount-proc"],
            &[
                "--user",
                "--map-root-user",
                "--pid",
                "--fork",
                "--kill-child",
                "--mount-proc",
            ],
        ];
        let works = |flags: &[&str]| {
            Command::new("unshare")
                .args(flags)
                .arg("true")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let Some(flags) = tried.into_iter().find(|flags| works(flags)) else {
            // CI runs as root on a machine that makes namespaces: a skip there would hide
            // that the test checked nothing.
            assert!(
                std::env::var_os("CI").is_none(),
                "no PID namespace with its own /proc could be made, and CI must check the look"
            );
            eprintln!(
                "skipped: no PID namespace with its own /proc can be made here (no unshare, or \
                 user namespaces are disabled), and the look is unsure wherever other \
                 programs start processes"
            );
            return;
        };
        // The test's name as the harness knows it: its path without the crate's name.
        let module = module_path!().split_once("::").map_or("", |(_, m)| m);
        let out = Command::new("unshare")
            .args(flags)
            .arg(std::env::current_exe().unwrap())
            .args(["--exact", &format!("{module}::{name}"), "--nocapture"])
            .env(IN_OWN_NAMESPACE, "1")
            .output()
            .unwrap();
        let said = format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // A name the harness does not know runs no test, and succeeds.
        assert!(
            out.status.success() && said.contains("1 passed"),
            "in its own PID namespace: {said}"
        );
    }

    /// Processes other programs start while a window is open make the look's answer "maybe
    /// running", so the test runs where only its own processes take ids: there every answer
    /// is certain.
    #[test]
    fn a_process_started_in_the_window_that_runs_is_seen_until_it_is_gone() {
        if std::env::var_os(IN_OWN_NAMESPACE).is_none() {
            run_in_own_namespace(
                "a_process_started_in_the_window_that_runs_is_seen_until_it_is_gone",
            );
            return;
        }
        let window = StartWindow::open().expect("the namespace's own /proc tells");
        let sleeping = Sleeping::start();
        assert!(
            !window.nothing_started_runs(),
            "a sleep started in the window"
        );
        drop(sleeping);
        assert!(
            window.nothing_started_runs(),
            "the sleep was killed and reaped, yet the window was not quiet"
        );
        let window = StartWindow::open().expect("the namespace's own /proc tells");
        Command::new("true").status().unwrap();
        assert!(
            window.nothing_started_runs(),
            "a window whose command ended was not quiet"
        );
    }

    #[test]
    fn a_stopped_process_still_counts_as_running() {
        let Some(window) = window() else {
            return;
        };
        let sleeping = Sleeping::start();
        let pid = nix::unistd::Pid::from_raw(sleeping.0.id().cast_signed());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
        assert!(!window.nothing_started_runs());
    }

    #[test]
    fn a_process_whose_first_thread_ended_is_seen_while_another_runs() {
        let Some(window) = window() else {
            return;
        };
        // Python's main thread can end the way C's can, leaving the other thread running.
        let script = "import ctypes, threading, time\n\
                      threading.Thread(target=lambda: time.sleep(30)).start()\n\
                      ctypes.CDLL(None).pthread_exit(None)\n";
        let Ok(child) = Command::new("python3").args(["-c", script]).spawn() else {
            eprintln!("skipped: no python3 here");
            return;
        };
        let running = Sleeping(child);
        let id = running.0.id();
        let waiting = Instant::now();
        let first_thread_ended = || {
            StatusFields::of(&fs::read_to_string(format!("/proc/{id}/status")).unwrap_or_default())
                .is_some_and(|s| s.zombie)
        };
        while !first_thread_ended() && waiting.elapsed() < Duration::from_secs(30) {
            thread::sleep(Duration::from_millis(10));
        }
        assert!(first_thread_ended(), "the first thread never ended");
        assert!(!window.nothing_started_runs());
    }

    #[test]
    fn a_status_says_what_became_of_its_process() {
        let status = |process, zombie, killed| StatusFields {
            process,
            zombie,
            killed,
        };
        let never = || -> bool { panic!("only a zombie's threads are looked at") };
        assert_eq!(
            what_became_of(&status(5, false, false), 5, never),
            State::Runs
        );
        assert_eq!(
            what_became_of(&status(5, false, true), 5, never),
            State::Dying
        );
        assert_eq!(
            what_became_of(&status(5, true, false), 5, || false),
            State::Gone
        );
        assert_eq!(
            what_became_of(&status(5, true, true), 5, || true),
            State::Runs
        );
        // A thread is looked at under its process's id.
        assert_eq!(
            what_became_of(&status(4, false, false), 5, never),
            State::Gone
        );
    }

    #[test]
    fn a_proc_mount_that_hides_processes_is_told_apart() {
        let plain = "22 1 0:21 / /proc rw,nosuid - proc proc rw\n";
        let hidden = "22 1 0:21 / /proc rw,nosuid - proc proc rw,hidepid=2\n";
        let invisible = "22 1 0:21 / /proc rw - proc proc rw,hidepid=invisible\n";
        let off = "22 1 0:21 / /proc rw - proc proc rw,hidepid=0\n";
        let elsewhere = "30 1 0:40 / /mnt/proc rw - proc proc rw,hidepid=2\n";
        let subset = "22 1 0:21 / /proc rw - proc proc rw,subset=pid\n";
        assert!(!hides_processes(plain));
        assert!(hides_processes(hidden));
        assert!(hides_processes(invisible));
        assert!(!hides_processes(off));
        assert!(!hides_processes(elsewhere));
        assert!(hides_processes(subset));
    }

    #[test]
    fn ids_within_a_window_are_those_after_its_first_up_to_its_last() {
        assert!(within((10, 12), 11));
        assert!(within((10, 12), 12));
        assert!(!within((10, 12), 10));
        assert!(!within((10, 12), 13));
    }
}
