//! Exit codes: 0 success, 2 bad input (the file, the prompt or an argument is wrong), 1 anything
//! else (a failure of the machine or of tally itself).

use tally_engine::EngineError;
use tally_gguf::GgufError;
use tally_model::ModelError;

/// Bad input the user can fix.
pub const BAD_INPUT: i32 = 2;
pub const FAILURE: i32 = 1;

fn engine_is_input(e: &EngineError) -> bool {
    match e {
        EngineError::Model(_)
        | EngineError::Gguf(_)
        | EngineError::TokenId { .. }
        | EngineError::TooLong { .. } => true,
        EngineError::InNode { source, .. } => engine_is_input(source),
        _ => false,
    }
}

pub fn code(e: &anyhow::Error) -> i32 {
    for cause in e.chain() {
        if cause.downcast_ref::<GgufError>().is_some()
            || cause.downcast_ref::<ModelError>().is_some()
        {
            return BAD_INPUT;
        }
        if let Some(ee) = cause.downcast_ref::<EngineError>() {
            return if engine_is_input(ee) {
                BAD_INPUT
            } else {
                FAILURE
            };
        }
        if cause.downcast_ref::<tally_text::TextError>().is_some()
            || cause.downcast_ref::<crate::cmd::InputError>().is_some()
        {
            return BAD_INPUT;
        }
    }
    FAILURE
}
