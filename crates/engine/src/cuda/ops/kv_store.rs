//! The KV cache store (`Op::KvStore`; reference `cpu/ops/kv_store.rs`): `kv_store` of
//! `kernels/kv_store.cu` writes the batch's rows at the position read from the device.

use tally_model::Node;

use super::Io;
use crate::EngineError;
use crate::cuda::CudaBackend;
use crate::cuda::args::KvStoreArgs;
use crate::cuda::launch::{blocks, launch};

pub fn kv_store(b: &CudaBackend, node: &Node, io: &Io) -> Result<(), EngineError> {
    let k = node.inputs[0];
    let cap = node.outputs[0].rows.min(node.outputs[1].rows);
    let a = KvStoreArgs {
        k: io.ins[0].0,
        ldk: io.ins[0].1,
        v: io.ins[1].0,
        ldv: io.ins[1].1,
        kc: io.outs[0].0,
        ldkc: io.outs[0].1,
        vc: io.outs[1].0,
        ldvc: io.outs[1].1,
        pos: io.ins[2].0,
        rows: k.rows as i32,
        cols: k.cols as i32,
        cap: cap as i32,
    };
    let n = (k.rows * k.cols) as i64;
    // SAFETY: KvStoreArgs mirrors kv_store.cu's struct (layout asserted at kernel build). One
    // thread per element of the k (and v) view, grid.y 0/1 for K/V; the kernel writes cache rows
    // pos + r only below `cap`, the rows both cache views hold (whole cache buffers `prepare`
    // sized for max_ctx); pos is the plan's `[1, 1]` i32 position buffer.
    unsafe {
        launch(
            b.kernels.kv_store,
            (blocks(n, 256), 2, 1),
            (256, 1, 1),
            0,
            b.cu_stream(),
            &a,
        )
    }
}
