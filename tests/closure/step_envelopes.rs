//! Persisting a closure's steps without building them: `Closure::encode_step_delta_into`
//! appends exactly the bytes of `step_delta().encode()`, and `ClosureDelta::encode_into`
//! exactly those of `encode()`, at every step of any run.

use kleene::testing::closure::{policy, scripted_agent};
use kleene::{
    Task,
    closure::Closure,
    closure::{Spec, machine::ClosureDelta, step::Session},
    id::TaskId,
};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_step_encoded_from_the_audit_log_is_its_delta_encoded(
        policy in policy(),
        mut agent in scripted_agent(),
    ) {
        let task = Task::new(TaskId::new("x").unwrap(), Spec::new("add /login"));
        let mut closure = Closure::start(task, Session::new("build", "demo").unwrap(), policy);
        let mut store = b"earlier".to_vec();
        let mut expected = store.clone();
        loop {
            let delta = closure.step_delta();
            let whole = delta.encode().unwrap();
            let len = closure.encode_step_delta_into(&mut store).unwrap();
            prop_assert_eq!(len, whole.len());
            prop_assert_eq!(delta.encode_into(&mut expected).unwrap(), whole.len());
            prop_assert_eq!(&store, &expected);
            prop_assert_eq!(&store[store.len() - len..], whole.as_slice());
            if matches!(closure, Closure::Done(_)) {
                break;
            }
            closure = closure.step(&mut agent);
        }
        let (deltas, read) = ClosureDelta::decode_log(&store[7..]).unwrap();
        prop_assert_eq!(read, store.len() - 7);
        prop_assert_eq!(Closure::restore_from_deltas(deltas).unwrap().audit().head(), closure.audit().head());
    }
}
