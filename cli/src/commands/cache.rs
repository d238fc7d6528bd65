//! `kleene cache`: what the cache of accepted results holds, and pruning it.

use std::fs;

use kleene::batch::cache::FileCache;
use kleene::error::Chain;
use kleene::shell::counted;

use super::{Failure, Outcome};
use crate::cli::{CacheArgs, CacheCommandArgs, Exit};
use crate::report::Reporter;

/// `kleene cache`.
pub fn cache(args: &CacheCommandArgs, rep: &mut Reporter) -> Outcome {
    let dir = CacheArgs {
        cache: args.cache.clone(),
        no_cache: false,
    }
    .dir(&args.state.state)
    .unwrap_or_default();
    let cache = FileCache::new(&dir);
    let shown = dir.display();
    if args.clear {
        let usage = cache
            .usage()
            .map_err(|e| Failure::halted(Chain(&e).to_string()))?;
        for sub in ["entries", "objects"] {
            let path = dir.join(sub);
            match fs::remove_dir_all(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(Failure::halted(format!("remove {}: {e}", path.display())));
                }
            }
        }
        rep.say(&format!(
            "cleared {shown}: {} and {} removed ({}); the next run makes every call",
            counted(usage.entries, "result", "results"),
            counted(usage.objects, "object", "objects"),
            bytes(usage.bytes)
        ));
        return Ok(Exit::Ok);
    }
    if args.prune {
        let pruned = cache
            .prune(|_| true)
            .map_err(|e| Failure::halted(Chain(&e).to_string()))?;
        rep.say(&format!(
            "pruned {shown}: {} that did not read back and {} no result names removed ({}); {} kept",
            counted(pruned.entries, "result", "results"),
            counted(pruned.objects, "object", "objects"),
            bytes(pruned.bytes),
            counted(pruned.kept, "result", "results"),
        ));
        return Ok(Exit::Ok);
    }
    let usage = cache
        .usage()
        .map_err(|e| Failure::halted(Chain(&e).to_string()))?;
    rep.say(&format!(
        "{shown}: {} of accepted work, {} ({})",
        counted(usage.entries, "result", "results"),
        counted(usage.objects, "object", "objects"),
        bytes(usage.bytes)
    ));
    Ok(Exit::Ok)
}

/// `n` bytes for people: KiB, MiB or GiB above a thousand of the unit below.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 3] = ["KiB", "MiB", "GiB"];
    let mut value = n as f64;
    let mut unit = None;
    for u in UNITS {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = Some(u);
    }
    match unit {
        None => counted(n, "byte", "bytes"),
        Some(u) => format!("{value:.1} {u}"),
    }
}

#[cfg(test)]
mod tests {
    use super::bytes;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(bytes(1), "1 byte");
        assert_eq!(bytes(1023), "1023 bytes");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
    }
}
