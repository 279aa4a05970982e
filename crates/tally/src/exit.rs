//! Exit codes: 0 success, 2 bad input (the file, the prompt or an argument is wrong, or the model
//! file changed while mapped), 3 no verdict (measured, but a validation failed or the noise gate
//! ran out of retries, or it found no quiet window at all: the report or the message says so),
//! 1 anything else (a failure of the machine or of
//! tally itself).

use tally_engine::EngineError;
use tally_gguf::GgufError;
use tally_model::ModelError;
use tally_text::TextError;

/// Bad input the user can fix.
pub const BAD_INPUT: i32 = 2;
pub const FAILURE: i32 = 1;
/// The measurements completed but cannot be trusted: a validation failed or the noise gate ran
/// out of retries; the report says "no verdict" where it applies.
pub const NO_VERDICT: i32 = 3;
/// The mapped model file was truncated or overwritten while tally read it (SIGBUS): the file as
/// read is bad, so this is the bad-input code.
pub const MAPPED_FILE_CHANGED: i32 = BAD_INPUT;

/// The error and its causes on one line, each cause once: a cause whose text an outer message
/// already carries (`GgufError::Io` prints its OS error and also returns it as its source) is
/// not repeated.
pub fn render(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let s = cause.to_string();
        if out.contains(&s) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&s);
    }
    out
}

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
            || cause.downcast_ref::<TextError>().is_some()
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
        if cause.downcast_ref::<crate::cmd::NoVerdict>().is_some() {
            return NO_VERDICT;
        }
        // The noise gate threw away every window (the machine stayed busy): nothing is wrong
        // with tally or the input; the figure just cannot be had here, now.
        if let Some(tally_ledger::LedgerError::NoCleanWindow { .. }) =
            cause.downcast_ref::<tally_ledger::LedgerError>()
        {
            return NO_VERDICT;
        }
    }
    FAILURE
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A gate that found no quiet window is "no verdict" (3), also when it is wrapped in
    /// context; a plain failure stays 1.
    #[test]
    fn no_clean_window_is_no_verdict() {
        let e = anyhow::Error::new(tally_ledger::LedgerError::NoCleanWindow {
            what: "e2e: prefill".into(),
            discards: 7,
            reasons: "CPU busy: 1.12 cores used by other processes (limit 0.50)".into(),
        })
        .context("measuring tally");
        assert_eq!(code(&e), NO_VERDICT);
        assert!(render(&e).contains("no clean window after 7 discards"));
        assert_eq!(code(&anyhow::anyhow!("something else")), FAILURE);
    }
}
