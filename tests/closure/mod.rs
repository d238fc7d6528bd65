mod runs;
// A closure's incremental form: deltas per step, verified and folded on restore.
mod incremental;
// Steps persisted straight from the audit log: the same bytes as their deltas.
mod step_envelopes;
mod tamper;
