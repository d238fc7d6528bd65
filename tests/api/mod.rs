// What the public API may and may not name.
mod public_api;
// What the examples promise about themselves (the minimal tokio example's length).
mod examples;
// Error messages and their source chains.
mod error_chain;
// The library in layers: no import runs up, no cycle between modules.
mod foundation;
mod layers;
