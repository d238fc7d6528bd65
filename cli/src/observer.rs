//! What the CLI does with a shell run's calls as they run: each event on the reporter, each
//! finished call's record in the state directory's closure log.

use std::sync::{Arc, Mutex, PoisonError};

use kleene::closure::ClosureRecord;
use kleene::error::Chain;
use kleene::id::TaskId;
use kleene::shell::{ShellEvent, ShellObserver};

use crate::report::{Event, Reporter};
use crate::state::StateDir;

/// The CLI's observer of a run's calls.
#[derive(Debug)]
pub struct Observer {
    /// Where events are shown.
    pub rep: Arc<Mutex<Reporter>>,
    /// Where closure records are appended.
    pub state: StateDir,
}

impl ShellObserver for Observer {
    fn event(&self, event: ShellEvent) {
        let mut rep = self.rep.lock().unwrap_or_else(PoisonError::into_inner);
        let event = match event {
            ShellEvent::CallStarted { task, call } => Event::TaskStarted {
                task: task.to_string(),
                call,
            },
            ShellEvent::FixSpawned {
                task,
                fix,
                depth,
                triggering,
            } => Event::FixSpawned {
                task: task.to_string(),
                fix: fix.to_string(),
                depth,
                triggering: triggering.iter().map(ToString::to_string).collect(),
            },
            ShellEvent::CommandStarted {
                task,
                root_task,
                role,
                command,
            } => Event::CommandStarted {
                task: task.to_string(),
                root_task: root_task.to_string(),
                role,
                command,
            },
            ShellEvent::CommandFinished {
                task,
                root_task,
                role,
                status,
            } => Event::CommandFinished {
                task: task.to_string(),
                root_task: root_task.to_string(),
                role,
                status,
            },
            ShellEvent::CheckFailed {
                task,
                root_task,
                check,
                severity,
                status,
            } => Event::CheckFailed {
                task: task.to_string(),
                root_task: root_task.to_string(),
                check: check.to_string(),
                severity: severity.to_string(),
                status,
            },
            ShellEvent::Warning(text) => return rep.say(&format!("warning: {text}")),
            _ => return,
        };
        rep.emit(&event);
    }

    fn call_ended(&self, task: &TaskId, call: u32, record: &ClosureRecord) -> Result<(), String> {
        self.state
            .append_closure(task, call, record)
            .map_err(|e| Chain(&e).to_string())?;
        // The line that reports the call's failure shows its failed checks' output, and
        // only the record holds them (the journal binds the record by its digest).
        self.rep
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .note_record(record);
        Ok(())
    }
}
