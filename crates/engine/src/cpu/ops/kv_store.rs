//! The KV cache store: the batch's keys and values into the cache rows of its positions. The
//! backend narrows the output views to rows `pos..pos+T` (the position is device data), so here
//! it is a copy.

use super::Mat;
use crate::EngineError;

pub fn kv_store(k: &Mat, v: &Mat, kc: &mut Mat, vc: &mut Mat) -> Result<(), EngineError> {
    for (src, dst) in [(k, kc), (v, vc)] {
        if (src.rows, src.cols) != (dst.rows, dst.cols) {
            return Err(EngineError::Internal(format!(
                "kv_store: {}x{} rows into {}x{}",
                src.rows, src.cols, dst.rows, dst.cols
            )));
        }
        dst.data.copy_from_slice(&src.data);
    }
    Ok(())
}
