//! Plan JSON (`AppBuildPlan::from_json`), then normalisation, consolidation and validation
//! of whatever loads. A loaded plan's own JSON must load back to the same plan.
#![no_main]

use kleene::AppBuildPlan;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let plan = match AppBuildPlan::from_json(text) {
        Ok(plan) => plan,
        Err(e) => {
            let _ = (e.to_string(), e.position(), e.field().len());
            return;
        }
    };
    let again = AppBuildPlan::from_json(&plan.to_json()).expect("a loaded plan's JSON loads");
    assert_eq!(again, plan, "a loaded plan's JSON loads as another plan");
    match plan.validate() {
        Ok(validated) => {
            let _ = (validated.digest(), validated.to_dot());
            let back = validated.to_app_build_plan();
            assert!(
                back.validate().is_ok(),
                "a validated plan does not validate again"
            );
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
