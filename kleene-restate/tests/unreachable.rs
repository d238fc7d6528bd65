//! Exit codes that tell a server that cannot be reached from one that refused.

use std::process::Command;

/// Nothing listens on port 1 of loopback: every request is refused a connection.
#[test]
fn a_server_that_cannot_be_reached_exits_3_naming_it() {
    for args in [
        &["status", "--channel", "run-000000000000"][..],
        &["resume", "--channel", "run-000000000000"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_kleene-restate"))
            .args(args)
            .env("RESTATE_INGRESS_URL", "http://127.0.0.1:1")
            .env("RESTATE_ADMIN_URL", "http://127.0.0.1:1")
            .env("KLEENE_RESTATE_RETRY_SECS", "0")
            .output()
            .expect("run kleene-restate");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {err}");
        assert!(err.contains("127.0.0.1:1"), "{err}");
    }
}
