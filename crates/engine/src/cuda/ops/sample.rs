//! Sampling on the device: `sample_token` (kernels/sample.cu) reads the plan's logits, applies the
//! penalties from a small window buffer, and writes one token id, the only thing downloaded. The
//! procedure is the CPU reference's ([`crate::sample`]), step for step.

use tally_model::Plan;

use crate::EngineError;
use crate::cuda::CudaBackend;
use crate::cuda::args::{ArgmaxArgs, SampleArgs};
use crate::cuda::consts::SAMPLE_THREADS;
use crate::cuda::launch::{blocks, launch};
use crate::cuda::mem::DevBuf;
use crate::sample::{SampleStep, min_p_weight};

/// The device buffers of sampling, grown on demand: the penalised logits, the window, the id.
#[derive(Default)]
pub struct SampleBufs {
    work: Option<DevBuf>,
    window: Option<DevBuf>,
    out: Option<DevBuf>,
    best: Option<DevBuf>,
}

fn at_least(slot: &mut Option<DevBuf>, bytes: usize, what: &str) -> Result<u64, EngineError> {
    if slot.as_ref().is_none_or(|b| b.bytes < bytes) {
        *slot = Some(DevBuf::alloc(bytes.max(4), what)?);
    }
    Ok(slot.as_ref().map(|b| b.ptr).unwrap_or(0))
}

/// Greedy decoding without penalties (an empty window): `argmax_token` over many blocks, the
/// same key and tie rule as the sampler's top token (largest key, then lowest id; NaN as -inf).
fn argmax(
    k: crate::cuda::launch::Kernel,
    bufs: &mut SampleBufs,
    logits: u64,
    vocab: usize,
    sms: u32,
    stream: cudarc::driver::sys::CUstream,
) -> Result<i32, EngineError> {
    Ok(argmax_rows(k, bufs, (logits, 0), 1, vocab, sms, stream)?[0] as i32)
}

/// `argmax_token` over each of `rows` rows of `vocab` logits (`logits`: pointer and row stride
/// in floats), one launch a row into its own packed u64, then one download of the `rows` ids.
fn argmax_rows(
    k: crate::cuda::launch::Kernel,
    bufs: &mut SampleBufs,
    (logits, ld): (u64, i64),
    rows: usize,
    vocab: usize,
    sms: u32,
    stream: cudarc::driver::sys::CUstream,
) -> Result<Vec<u32>, EngineError> {
    let best = at_least(&mut bufs.best, 8 * rows.max(1), "greedy tokens")?;
    // SAFETY: `best` was grown above to at least 8 * rows bytes on this stream's context; the
    // memset (2 u32 a row) is ordered on the stream before the kernels that read it.
    unsafe { cudarc::driver::sys::cuMemsetD32Async(best, 0, 2 * rows.max(1), stream) }
        .result()
        .map_err(|e| EngineError::Cuda(format!("zeroing the greedy tokens: {e}")))?;
    for r in 0..rows {
        let args = ArgmaxArgs {
            logits: logits + 4 * (r as u64) * (ld.max(0) as u64),
            best: best + 8 * r as u64,
            vocab: vocab as i32,
            pad0: 0,
        };
        // SAFETY: ArgmaxArgs mirrors sample.cu's struct (layout asserted at kernel build).
        // Blocks of 256 threads stride over the `vocab` logits of row r of the plan's logits view
        // (`rows` rows of stride `ld` floats, at least `vocab` wide); `best + 8r` is row r's u64
        // in the buffer grown and zeroed above, which each block folds its maximum into with one
        // atomicMax.
        unsafe {
            launch(
                k,
                (blocks(vocab as i64, 256 * 4).clamp(1, 2 * sms), 1, 1),
                (256, 1, 1),
                0,
                stream,
                &args,
            )
        }?;
    }
    let mut packed = vec![0u64; rows];
    if let Some(o) = &bufs.best {
        o.download_at(0, &mut packed, stream)?;
    }
    Ok(packed
        .iter()
        .map(|p| 0xffff_ffffu32 - (p & 0xffff_ffff) as u32)
        .collect())
}

impl CudaBackend {
    /// The greedy token after each row of `plan`'s logits view (after its dispatches), taken on
    /// the device: only the ids are downloaded.
    pub(crate) fn argmax_rows_on_device(&mut self, plan: &Plan) -> Result<Vec<u32>, EngineError> {
        let (rows, vocab) = (plan.logits.rows, plan.logits.cols);
        let view = self.view(plan, &plan.logits)?;
        let stream = self.cu_stream();
        let sms = self.props.sm_count.max(1);
        let mut bufs = std::mem::take(&mut self.sampling);
        let ids = argmax_rows(
            self.kernels.argmax_token,
            &mut bufs,
            view,
            rows,
            vocab,
            sms,
            stream,
        );
        self.sampling = bufs;
        let ids = ids?;
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(EngineError::Internal(format!(
                "device argmax returned id {bad} for a vocabulary of {vocab}"
            )));
        }
        Ok(ids)
    }

    /// One sampling step on the logits of `plan` (after its dispatches); returns the token id.
    pub(crate) fn sample_on_device(
        &mut self,
        plan: &Plan,
        step: &SampleStep<'_>,
    ) -> Result<u32, EngineError> {
        let p = step.params;
        let vocab = plan.logits.cols;
        let (logits, _) = self.view(plan, &plan.logits)?;
        let stream = self.cu_stream();
        let mut bufs = std::mem::take(&mut self.sampling);
        let sms = self.props.sm_count.max(1);
        let result: Result<i32, EngineError> = (|| {
            if p.is_greedy() && step.window.is_empty() {
                return argmax(
                    self.kernels.argmax_token,
                    &mut bufs,
                    logits,
                    vocab,
                    sms,
                    stream,
                );
            }
            let work = at_least(&mut bufs.work, vocab * 4, "sampling work")?;
            let window = at_least(&mut bufs.window, step.window.len() * 4, "sampling window")?;
            let out = at_least(&mut bufs.out, 4, "sampled id")?;
            let ids: Vec<i32> = step.window.iter().map(|&t| t as i32).collect();
            if let Some(w) = &bufs.window {
                w.upload(&ids, stream)?;
            }
            let args = SampleArgs {
                logits,
                work,
                window,
                out,
                vocab: vocab as i32,
                n_window: ids.len() as i32,
                top_k: if p.top_k >= vocab { 0 } else { p.top_k as i32 },
                greedy: i32::from(p.is_greedy()),
                temperature: p.temperature,
                top_p: p.top_p,
                rep: p.repetition_penalty,
                freq: p.frequency_penalty,
                presence: p.presence_penalty,
                min_weight: min_p_weight(p.min_p),
                random: step.random,
            };
            // SAFETY: SampleArgs mirrors sample.cu's struct (layout asserted at kernel build).
            // One block of SAMPLE_THREADS, the count the kernel was built with; logits is the
            // plan's `[1, vocab]` logits view, work (vocab floats), window (n_window ids) and out
            // (one id) were grown above to at least those sizes.
            unsafe {
                launch(
                    self.kernels.sample_token,
                    (1, 1, 1),
                    (SAMPLE_THREADS, 1, 1),
                    0,
                    stream,
                    &args,
                )
            }?;
            let mut id = [0i32; 1];
            if let Some(o) = &bufs.out {
                o.download_at(0, &mut id, stream)?;
            }
            Ok(id[0])
        })();
        self.sampling = bufs;
        let id = result?;
        if id < 0 || id as usize >= vocab {
            return Err(EngineError::Internal(format!(
                "device sampler returned id {id} for a vocabulary of {vocab}"
            )));
        }
        Ok(id as u32)
    }
}
