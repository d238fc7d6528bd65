//! The journal in memory: event values, no encoding.

use std::collections::HashMap;

use super::error::JournalError;
use super::{EvidenceJournal, JournalLoad};
use crate::batch::evidence::BatchEvidence;
use crate::batch::evidence::event::EvidenceEvent;
use crate::id::ChannelId;

/// A journal in memory, holding event values (no encoding): for tests, benches and callers
/// that keep the journal alive themselves.
#[derive(Debug, Clone, Default)]
pub struct MemoryJournal {
    /// foldhash (seeded per process) rather than SipHash: a run looks its channel up on
    /// every append.
    channels: HashMap<
        ChannelId,
        (Option<BatchEvidence>, Vec<EvidenceEvent>),
        foldhash::fast::RandomState,
    >,
}

impl EvidenceJournal for MemoryJournal {
    fn append(
        &mut self,
        channel: &ChannelId,
        events: &[EvidenceEvent],
    ) -> Result<(), JournalError> {
        // Looked up before it is cloned: a run appends to one channel thousands of times.
        match self.channels.get_mut(channel) {
            Some((_, tail)) => tail.extend_from_slice(events),
            None => {
                self.channels
                    .insert(channel.clone(), (None, events.to_vec()));
            }
        }
        Ok(())
    }

    fn append_owned(
        &mut self,
        channel: &ChannelId,
        events: &mut Vec<EvidenceEvent>,
    ) -> Result<(), JournalError> {
        // Moved, not cloned: the tail takes the values and `events` keeps its capacity. An
        // empty tail (a fresh one, or one a compaction emptied) takes the whole list
        // instead, and hands its own spare room back: no copy of thousands of events.
        match self.channels.get_mut(channel) {
            Some((_, tail)) if tail.is_empty() => std::mem::swap(tail, events),
            Some((_, tail)) => tail.append(events),
            None => {
                self.channels
                    .insert(channel.clone(), (None, std::mem::take(events)));
            }
        }
        Ok(())
    }

    fn load(&self, channel: &ChannelId) -> Result<Option<JournalLoad>, JournalError> {
        Ok(self
            .channels
            .get(channel)
            .map(|(snapshot, events)| JournalLoad {
                snapshot: snapshot.clone(),
                events: events.clone(),
                torn_tail: None,
            }))
    }

    fn compact(
        &mut self,
        channel: &ChannelId,
        evidence: &BatchEvidence,
    ) -> Result<(), JournalError> {
        self.channels
            .insert(channel.clone(), (Some(evidence.clone()), Vec::new()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{chan, events};
    use super::*;

    #[test]
    fn memory_journal_compaction_replaces_the_tail() {
        let mut journal = MemoryJournal::default();
        let all = events();
        journal.append(&chan(), &all).unwrap();
        let evidence = BatchEvidence::fold(all).unwrap();
        journal.compact(&chan(), &evidence).unwrap();
        let load = journal.load(&chan()).unwrap().unwrap();
        assert!(load.events.is_empty());
        assert_eq!(load.into_evidence().unwrap(), evidence);
    }
}
