//! Token embedding lookup.

use super::{Mat, Weight};
use crate::EngineError;
use crate::cpu::{IMat, dequant_rows};

pub fn embed(ids: &IMat, w: &Weight<'_>, out: &mut Mat) -> Result<(), EngineError> {
    let (d, vocab) = (w.k(), w.n_rows());
    if out.cols != d || out.rows != ids.data.len() {
        return Err(EngineError::Internal("embed: shape mismatch".into()));
    }
    for (t, &id) in ids.data.iter().enumerate() {
        let row = usize::try_from(id)
            .ok()
            .filter(|&r| r < vocab)
            .ok_or(EngineError::TokenId {
                id: id as u32,
                vocab,
            })?;
        dequant_rows(w, row, 1, out.row_mut(t))?;
    }
    Ok(())
}
