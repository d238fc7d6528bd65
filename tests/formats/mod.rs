// Every digest pinned: the canonical encoding never moves by accident.
mod canonical_encoding;
mod envelope;
// The pinned bytes of the task and closure payloads, through their wire types.
mod wire_closure;
// The evidence payloads and the acceptance record, pinned byte for byte.
mod wire_evidence;
mod wire_messages;
// Payloads written by bincode's native encoder: the bytes of the records' serde forms.
mod wire_native_encode;
