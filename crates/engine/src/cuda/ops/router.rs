//! The router's softmax and top-k (`Op::TopK`; reference `cpu/ops/router.rs`): `router_topk` of
//! `kernels/router.cu`, one warp per token.

use tally_model::Node;

use super::Io;
use crate::EngineError;
use crate::cuda::CudaBackend;
use crate::cuda::args::TopkArgs;
use crate::cuda::launch::{blocks, launch};

pub fn topk(b: &CudaBackend, node: &Node, io: &Io, k: usize) -> Result<(), EngineError> {
    let l = node.inputs[0];
    let a = TopkArgs {
        logits: io.ins[0].0,
        ld: io.ins[0].1,
        ids: io.outs[0].0,
        ld_ids: io.outs[0].1,
        w: io.outs[1].0,
        ld_w: io.outs[1].1,
        rows: l.rows as i32,
        experts: l.cols as i32,
        k: k as i32,
    };
    if l.cols > 1024 || k > 16 {
        return Err(EngineError::Unsupported(format!(
            "router top-{k} of {} experts exceeds the kernel's limits (1024, 16)",
            l.cols
        )));
    }
    let kernel = if l.cols <= 256 {
        b.kernels.router_topk8
    } else {
        b.kernels.router_topk
    };
    // SAFETY: TopkArgs mirrors router.cu's struct (layout asserted at kernel build). One warp
    // per logits row (8 per block; warps past `rows` return); experts <= 1024 (<= 256 for
    // router_topk8, picked above) and k <= 16 as the kernel's registers hold (checked above);
    // logits, ids (i32) and weights are the node's views of buffers `prepare` sized, k columns
    // each for the outputs.
    unsafe {
        launch(
            kernel,
            (blocks(l.rows as i64, 8), 1, 1),
            (256, 1, 1),
            0,
            b.cu_stream(),
            &a,
        )
    }
}
