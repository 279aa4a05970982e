//! The FFI boundary: owned handles over the llama.cpp / ggml C API and read-only snapshots of
//! ggml tensors. Everything unsafe about talking to llama.cpp lives here or next to a
//! `// SAFETY:` comment in the module that needs a raw call.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ffi::{CStr, CString, c_char, c_void};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Once;

use llama_cpp_sys_2 as sys;

use crate::PeerError;

thread_local! {
    /// Last warning/error lines llama.cpp logged on this thread (quoted in load errors).
    ///
    /// Per thread, not per process: llama.cpp logs a failed load, quantisation or graph call on
    /// the thread that made it, and a process-wide tail let another thread's `clear_log_tail`
    /// (tests load files in parallel) erase the line an error message was about to quote.
    static LOG_TAIL: RefCell<VecDeque<String>> = const { RefCell::new(VecDeque::new()) };
}
const LOG_TAIL_LINES: usize = 12;
static INIT: Once = Once::new();

unsafe extern "C" fn log_sink(level: sys::ggml_log_level, text: *const c_char, _user: *mut c_void) {
    if text.is_null() {
        return;
    }
    // SAFETY: llama.cpp passes a NUL-terminated string valid for the duration of the call.
    let line = unsafe { CStr::from_ptr(text) }.to_string_lossy();
    if std::env::var_os("TALLY_LLAMA_LOG").is_some() {
        eprint!("{line}");
    }
    if level == sys::GGML_LOG_LEVEL_WARN || level == sys::GGML_LOG_LEVEL_ERROR {
        // `try_with`/`try_borrow_mut`: a log line during thread teardown or from inside a
        // borrow is dropped, never a panic across the FFI boundary.
        let _ = LOG_TAIL.try_with(|t| {
            if let Ok(mut tail) = t.try_borrow_mut() {
                if tail.len() == LOG_TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(line.trim_end().to_string());
            }
        });
    }
}

/// The last warnings and errors llama.cpp logged on this thread, oldest first, joined by " | ".
pub(crate) fn log_tail() -> String {
    LOG_TAIL
        .try_with(|t| {
            t.try_borrow()
                .map(|t| t.iter().cloned().collect::<Vec<_>>().join(" | "))
                .unwrap_or_default()
        })
        .unwrap_or_default()
}

/// Forgets this thread's tail (before a call whose failure will quote it).
pub(crate) fn clear_log_tail() {
    let _ = LOG_TAIL.try_with(|t| {
        if let Ok(mut t) = t.try_borrow_mut() {
            t.clear();
        }
    });
}

/// Initialises llama.cpp once per process and routes its log into [`log_tail`] (set
/// `TALLY_LLAMA_LOG=1` to see it on stderr).
pub(crate) fn init_once() {
    INIT.call_once(|| {
        // SAFETY: plain global initialisation calls with a `'static` callback and no user data.
        unsafe {
            sys::llama_log_set(Some(log_sink), std::ptr::null_mut());
            sys::ggml_log_set(Some(log_sink), std::ptr::null_mut());
            #[cfg(feature = "dynamic-link")]
            sys::ggml_backend_load_all();
            sys::llama_backend_init();
        }
    });
}

/// Reads a NUL-terminated C string owned by ggml (static names) into a `String`.
fn c_str(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: ggml returns pointers to static or tensor-owned NUL-terminated strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// ggml's name of an op (`MUL_MAT`, `GLU`, ...).
pub(crate) fn op_name(op: sys::ggml_op) -> String {
    // SAFETY: `ggml_op_name` indexes a static table; any value below GGML_OP_COUNT is valid and
    // every op we pass comes from a tensor ggml built.
    c_str(unsafe { sys::ggml_op_name(op) })
}

/// ggml's name of a type (`f32`, `q4_K`, ...).
pub(crate) fn type_name(t: sys::ggml_type) -> String {
    // SAFETY: static table lookup on a type taken from a real tensor.
    c_str(unsafe { sys::ggml_type_name(t) })
}

/// Bytes of one row of `n` elements of type `t`.
pub(crate) fn row_bytes(t: sys::ggml_type, n: i64) -> u64 {
    // SAFETY: pure arithmetic on the type traits table.
    unsafe { sys::ggml_row_size(t, n) as u64 }
}

/// Whether `t` is a block-quantised type.
pub(crate) fn is_quantized(t: sys::ggml_type) -> bool {
    // SAFETY: pure lookup in the type traits table.
    unsafe { sys::ggml_is_quantized(t) }
}

/// An owned llama model.
pub(crate) struct Model {
    ptr: NonNull<sys::llama_model>,
}

impl Model {
    /// Loads a GGUF file; `n_gpu_layers` = 0 keeps everything on the CPU.
    pub(crate) fn load(path: &Path, n_gpu_layers: i32) -> Result<Model, PeerError> {
        Self::load_with(path, n_gpu_layers, false, false)
    }

    /// Loads a GGUF file on the CPU with its MTP ("nextn") layers (`load_mtp`), which a plain
    /// load skips.
    pub(crate) fn load_with_mtp(path: &Path) -> Result<Model, PeerError> {
        Self::load_with(path, 0, false, true)
    }

    /// Loads only the metadata and vocabulary (`vocab_only`): no tensor data is read, so
    /// vocab-only files load too.
    pub(crate) fn load_vocab_only(path: &Path) -> Result<Model, PeerError> {
        Self::load_with(path, 0, true, false)
    }

    fn load_with(
        path: &Path,
        n_gpu_layers: i32,
        vocab_only: bool,
        load_mtp: bool,
    ) -> Result<Model, PeerError> {
        init_once();
        let c_path = CString::new(path.to_string_lossy().as_bytes())
            .map_err(|_| PeerError::Load(format!("path {} contains a NUL byte", path.display())))?;
        clear_log_tail();
        // SAFETY: default params are plain data; the path outlives the call.
        let raw = unsafe {
            let mut mp = sys::llama_model_default_params();
            mp.n_gpu_layers = n_gpu_layers;
            mp.vocab_only = vocab_only;
            mp.load_mtp = load_mtp;
            sys::llama_model_load_from_file(c_path.as_ptr(), mp)
        };
        NonNull::new(raw).map(|ptr| Model { ptr }).ok_or_else(|| {
            PeerError::Load(format!(
                "llama.cpp could not load {}: {}",
                path.display(),
                log_tail()
            ))
        })
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::llama_model {
        self.ptr.as_ptr()
    }

    /// A scalar metadata value as text (`None` when absent or an array).
    pub(crate) fn meta(&self, key: &str) -> Option<String> {
        let key = CString::new(key).ok()?;
        let mut buf = vec![0u8; 256];
        // SAFETY: the buffer is writable for its length; llama writes a NUL-terminated string.
        let n = unsafe {
            sys::llama_model_meta_val_str(
                self.ptr.as_ptr(),
                key.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n < 0 {
            return None;
        }
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        Some(String::from_utf8_lossy(&buf[..end]).into_owned())
    }

    /// Vocabulary size.
    pub(crate) fn n_vocab(&self) -> u32 {
        // SAFETY: the model is alive; the vocab pointer is owned by it.
        let n = unsafe { sys::llama_vocab_n_tokens(sys::llama_model_get_vocab(self.ptr.as_ptr())) };
        u32::try_from(n).unwrap_or(0)
    }

    /// Token ids of `text` (bytes, need not be valid UTF-8) by `llama_tokenize`, without BOS.
    pub(crate) fn tokenize(&self, text: &[u8], parse_special: bool) -> Result<Vec<u32>, PeerError> {
        let len = i32::try_from(text.len()).map_err(|_| {
            PeerError::Param(format!("{} bytes is too long to tokenize", text.len()))
        })?;
        // Never more tokens than bytes, plus room for what llama.cpp may add.
        let mut buf = vec![0 as sys::llama_token; text.len() + 8];
        let cap = i32::try_from(buf.len()).unwrap_or(i32::MAX);
        // SAFETY: the model (and its vocab) is alive; `text` is readable for `len` bytes and
        // `buf` writable for `cap` tokens; llama.cpp reads no NUL terminator when given a length.
        let n = unsafe {
            sys::llama_tokenize(
                sys::llama_model_get_vocab(self.ptr.as_ptr()),
                text.as_ptr().cast(),
                len,
                buf.as_mut_ptr(),
                cap,
                false,
                parse_special,
            )
        };
        let n = usize::try_from(n)
            .map_err(|_| PeerError::Engine(format!("llama_tokenize failed ({n})")))?;
        buf.truncate(n);
        Ok(buf.into_iter().map(|t| t as u32).collect())
    }

    /// The bytes of token `id` by `llama_token_to_piece` (`special`: render control tokens'
    /// text; without it they are empty).
    pub(crate) fn token_to_piece(&self, id: u32, special: bool) -> Result<Vec<u8>, PeerError> {
        let mut buf = vec![0u8; 64];
        for _ in 0..2 {
            let cap = i32::try_from(buf.len()).unwrap_or(i32::MAX);
            // SAFETY: the model is alive; `buf` is writable for `cap` bytes; llama.cpp checks
            // the id against the vocabulary.
            let n = unsafe {
                sys::llama_token_to_piece(
                    sys::llama_model_get_vocab(self.ptr.as_ptr()),
                    id as sys::llama_token,
                    buf.as_mut_ptr().cast(),
                    cap,
                    0,
                    special,
                )
            };
            if n >= 0 {
                buf.truncate(n as usize);
                return Ok(buf);
            }
            // A negative count is the size needed.
            buf.resize(n.unsigned_abs() as usize, 0);
        }
        Err(PeerError::Engine(format!(
            "llama_token_to_piece({id}) failed"
        )))
    }

    /// Transformer blocks (without MTP blocks).
    pub(crate) fn n_layer(&self) -> u32 {
        // SAFETY: the model is alive.
        u32::try_from(unsafe { sys::llama_model_n_layer(self.ptr.as_ptr()) }).unwrap_or(0)
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        // SAFETY: we own the model; contexts borrowing it are dropped first (field order in
        // `LlamaPeer`).
        unsafe { sys::llama_model_free(self.ptr.as_ptr()) }
    }
}

/// Context settings that decide the graph llama.cpp builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CtxConfig {
    pub n_ctx: u32,
    pub n_batch: u32,
    pub n_ubatch: u32,
    pub threads: i32,
    pub flash_attn: bool,
    /// Let llama.cpp run host-resident weights' ops on the GPU (only when layers are offloaded,
    /// so a CPU run on a CUDA build stays on the CPU).
    pub op_offload: bool,
}

/// An owned llama context, optionally with the scheduler eval callback installed.
pub(crate) struct Context {
    ptr: NonNull<sys::llama_context>,
    pub(crate) config: CtxConfig,
}

impl Context {
    /// Creates a context. `cb` and `user` are handed to the scheduler; `user` must outlive the
    /// context (the caller keeps the probe boxed next to it).
    pub(crate) fn new(
        model: &Model,
        config: CtxConfig,
        cb: sys::ggml_backend_sched_eval_callback,
        user: *mut c_void,
    ) -> Result<Context, PeerError> {
        clear_log_tail();
        // SAFETY: default params are plain data; the model is alive and outlives the context.
        let raw = unsafe {
            let mut cp = sys::llama_context_default_params();
            cp.n_ctx = config.n_ctx;
            cp.n_batch = config.n_batch;
            cp.n_ubatch = config.n_ubatch;
            cp.n_seq_max = 1;
            cp.n_threads = config.threads;
            cp.n_threads_batch = config.threads;
            cp.flash_attn_type = if config.flash_attn {
                sys::LLAMA_FLASH_ATTN_TYPE_ENABLED
            } else {
                sys::LLAMA_FLASH_ATTN_TYPE_DISABLED
            };
            cp.no_perf = true;
            cp.op_offload = config.op_offload;
            cp.cb_eval = cb;
            cp.cb_eval_user_data = user;
            sys::llama_init_from_model(model.as_ptr(), cp)
        };
        NonNull::new(raw)
            .map(|ptr| Context { ptr, config })
            .ok_or_else(|| {
                PeerError::Engine(format!(
                    "llama.cpp could not create a context: {}",
                    log_tail()
                ))
            })
    }

    /// Creates a context of type MTP over `model` (loaded with its MTP layers): its decodes run
    /// the draft head's graph (`graph_mtp`), not the trunk.
    pub(crate) fn new_mtp(model: &Model, n_ctx: u32, threads: i32) -> Result<Context, PeerError> {
        clear_log_tail();
        // SAFETY: default params are plain data; the model is alive and outlives the context.
        let raw = unsafe {
            let mut cp = sys::llama_context_default_params();
            cp.ctx_type = sys::LLAMA_CONTEXT_TYPE_MTP;
            // An f32 cache (the default is f16), so an oracle compares maths, not cache rounding.
            cp.type_k = sys::GGML_TYPE_F32;
            cp.type_v = sys::GGML_TYPE_F32;
            cp.flash_attn_type = sys::LLAMA_FLASH_ATTN_TYPE_DISABLED;
            cp.n_ctx = n_ctx;
            cp.n_batch = n_ctx;
            cp.n_ubatch = n_ctx;
            cp.n_seq_max = 1;
            cp.n_threads = threads;
            cp.n_threads_batch = threads;
            cp.no_perf = true;
            sys::llama_init_from_model(model.as_ptr(), cp)
        };
        let config = CtxConfig {
            n_ctx,
            n_batch: n_ctx,
            n_ubatch: n_ctx,
            threads,
            flash_attn: false,
            op_offload: false,
        };
        NonNull::new(raw)
            .map(|ptr| Context { ptr, config })
            .ok_or_else(|| {
                PeerError::Engine(format!(
                    "llama.cpp could not create an MTP context: {}",
                    log_tail()
                ))
            })
    }

    /// One decode of an MTP context: token `tokens[i]` at position `pos0 + i` paired with
    /// hidden-state row i of `hidden` (`n_embd` values a row), logits for every row; returns
    /// them, row by row (`n_vocab` values each). The hidden state goes in as the entry's
    /// embedding (`llama_batch_ext_set_embd_token`, what llama.cpp's own driver uses:
    /// `llama_batch_ext_set_embd_state` is not implemented in this version).
    pub(crate) fn mtp_decode(
        &mut self,
        tokens: &[u32],
        pos0: u32,
        hidden: &[f32],
        n_embd: usize,
        n_vocab: u32,
    ) -> Result<Vec<Vec<f32>>, PeerError> {
        if tokens.is_empty() || hidden.len() != tokens.len() * n_embd {
            return Err(PeerError::Param(format!(
                "an MTP batch of {} tokens with {} hidden values",
                tokens.len(),
                hidden.len()
            )));
        }
        // SAFETY: the context is alive; the batch is freed below on every path.
        let batch = unsafe { sys::llama_batch_ext_init(self.ptr.as_ptr()) };
        if batch.is_null() {
            return Err(PeerError::Engine("llama_batch_ext_init failed".into()));
        }
        let fill = || -> Result<(), PeerError> {
            for (i, &t) in tokens.iter().enumerate() {
                let id = i32::try_from(t)
                    .map_err(|_| PeerError::Param(format!("token id {t} too large")))?;
                let pos = pos0 as i32 + i as i32;
                let row = &hidden[i * n_embd..(i + 1) * n_embd];
                let embd = sys::llama_embd {
                    data: row.as_ptr(),
                    n_rows: 1,
                    n_embd,
                };
                // SAFETY: the batch is alive; `pos` and the row outlive these calls, and the
                // row (borrowed from `hidden`) outlives the llama_process below, which reads it.
                let ok = unsafe {
                    let idx = sys::llama_batch_ext_add_token(batch, 0, id);
                    idx == i as i32
                        && sys::llama_batch_ext_set_pos(batch, idx, &pos)
                        && sys::llama_batch_ext_set_embd_token(batch, idx, embd)
                        && sys::llama_batch_ext_set_output_logits(batch, idx, true)
                };
                if !ok {
                    return Err(PeerError::Engine(format!(
                        "could not add MTP batch entry {i}: {}",
                        log_tail()
                    )));
                }
            }
            clear_log_tail();
            // SAFETY: the context and the batch are alive; the batch's views are valid.
            let rc = unsafe {
                sys::llama_process(self.ptr.as_ptr(), sys::LLAMA_PROCESS_TYPE_DECODE, batch)
            };
            if rc != 0 {
                return Err(PeerError::Engine(format!(
                    "llama_process (MTP) returned {rc}: {}",
                    log_tail()
                )));
            }
            Ok(())
        };
        let filled = fill();
        // SAFETY: we own the batch; nothing refers to it after the process call returned.
        unsafe { sys::llama_batch_ext_free(batch) };
        filled?;
        (0..tokens.len())
            .map(|i| {
                // SAFETY: the context is alive; row i was requested as an output.
                let p = unsafe { sys::llama_get_logits_ith(self.ptr.as_ptr(), i as i32) };
                if p.is_null() {
                    return Err(PeerError::Engine(format!("no MTP logits for row {i}")));
                }
                // SAFETY: llama owns a row of n_vocab floats at `p` until the next decode.
                Ok(unsafe { std::slice::from_raw_parts(p, n_vocab as usize) }.to_vec())
            })
            .collect()
    }

    /// Clears the KV cache and recurrent state (a fresh prompt, as llama-bench does per rep).
    pub(crate) fn clear_memory(&mut self) {
        // SAFETY: the context is alive; the memory handle is owned by it.
        unsafe { sys::llama_memory_clear(sys::llama_get_memory(self.ptr.as_ptr()), true) }
    }

    /// Decodes `tokens` at positions `pos0..`, in one `llama_decode` call (llama.cpp splits it
    /// into ubatches). Only the last token produces logits when `logits_last` is set.
    pub(crate) fn decode(
        &mut self,
        tokens: &[u32],
        pos0: u32,
        logits_last: bool,
    ) -> Result<(), PeerError> {
        let n = i32::try_from(tokens.len())
            .map_err(|_| PeerError::Engine("batch larger than i32::MAX tokens".into()))?;
        if n == 0 {
            return Err(PeerError::Engine("cannot decode an empty batch".into()));
        }
        let mut ids: Vec<i32> = Vec::with_capacity(tokens.len());
        for &t in tokens {
            ids.push(
                i32::try_from(t)
                    .map_err(|_| PeerError::Engine(format!("token id {t} too large")))?,
            );
        }
        let mut pos: Vec<i32> = (0..n).map(|i| pos0 as i32 + i).collect();
        let mut n_seq: Vec<i32> = vec![1; tokens.len()];
        let mut seq0: i32 = 0;
        let mut seq_ptrs: Vec<*mut i32> = vec![&mut seq0 as *mut i32; tokens.len()];
        let mut logits: Vec<i8> = vec![0; tokens.len()];
        if logits_last {
            logits[tokens.len() - 1] = 1;
        }
        let batch = sys::llama_batch {
            n_tokens: n,
            token: ids.as_mut_ptr(),
            embd: std::ptr::null_mut(),
            pos: pos.as_mut_ptr(),
            n_seq_id: n_seq.as_mut_ptr(),
            seq_id: seq_ptrs.as_mut_ptr(),
            logits: logits.as_mut_ptr(),
        };
        clear_log_tail();
        // SAFETY: every array of the batch has `n` valid elements and lives until the call
        // returns; llama_decode copies what it keeps.
        let rc = unsafe { sys::llama_decode(self.ptr.as_ptr(), batch) };
        if rc != 0 {
            return Err(PeerError::Engine(format!(
                "llama_decode returned {rc}: {}",
                log_tail()
            )));
        }
        Ok(())
    }

    /// Waits for all queued device work of this context.
    pub(crate) fn synchronize(&mut self) {
        // SAFETY: the context is alive.
        unsafe { sys::llama_synchronize(self.ptr.as_ptr()) }
    }

    /// The logits row of the last output token, copied.
    pub(crate) fn last_logits(&mut self, n_vocab: u32) -> Result<Vec<f32>, PeerError> {
        // SAFETY: the context is alive; -1 selects the last output row, which llama_decode
        // produced (we request logits for the last token).
        let p = unsafe { sys::llama_get_logits_ith(self.ptr.as_ptr(), -1) };
        if p.is_null() {
            return Err(PeerError::Engine(format!(
                "no logits for the last token: {}",
                log_tail()
            )));
        }
        // SAFETY: llama owns a row of n_vocab floats at `p` until the next decode.
        Ok(unsafe { std::slice::from_raw_parts(p, n_vocab as usize) }.to_vec())
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: we own the context.
        unsafe { sys::llama_free(self.ptr.as_ptr()) }
    }
}

/// One input of a snapshotted tensor.
#[derive(Debug, Clone)]
pub(crate) struct SrcSnap {
    /// Address of the tensor (identity within one graph execution).
    pub addr: usize,
    pub name: String,
    pub op: sys::ggml_op,
    pub type_: sys::ggml_type,
    pub ne: [i64; 4],
    pub nb: [usize; 4],
    pub nbytes: u64,
    /// Model weight (its buffer is a weights buffer, or it views one).
    pub is_weight: bool,
}

/// An owned copy of what a graph node looked like when the scheduler showed it to us.
#[derive(Debug, Clone)]
pub(crate) struct NodeSnap {
    pub src_: SrcSnap,
    pub op_params: [i32; 16],
    /// ggml's op name.
    pub op_name: String,
    /// Root of the view chain, when the node writes into a view of another tensor.
    pub view_root: Option<String>,
    pub srcs: Vec<SrcSnap>,
    /// Device the node ran on: its output buffer's device, or 0 for host memory (the CPU
    /// backend; a CUDA build gives it pinned host buffers whose buffer type names the GPU).
    pub device: usize,
    /// The node does nothing (view op, no elements, or not flagged for computation).
    pub is_noop: bool,
}

impl NodeSnap {
    pub(crate) fn name(&self) -> &str {
        &self.src_.name
    }
}

/// Walks `view_src` to the tensor that owns the memory.
///
/// # Safety
/// `t` must point to a live ggml tensor whose view chain is live.
unsafe fn view_root(mut t: *const sys::ggml_tensor) -> *const sys::ggml_tensor {
    // SAFETY: the caller guarantees the chain is live; ggml view chains are finite.
    unsafe {
        while !(*t).view_src.is_null() {
            t = (*t).view_src;
        }
    }
    t
}

/// # Safety
/// `t` must point to a live ggml tensor.
unsafe fn snap_src(t: *const sys::ggml_tensor) -> SrcSnap {
    // SAFETY: the caller guarantees `t` and its view chain are live for this call.
    unsafe {
        let r = &*t;
        let root = view_root(t);
        let buffer = if (*root).buffer.is_null() {
            r.buffer
        } else {
            (*root).buffer
        };
        let name = c_str(r.name.as_ptr());
        let usage_weights = !buffer.is_null()
            && sys::ggml_backend_buffer_get_usage(buffer) == sys::GGML_BACKEND_BUFFER_USAGE_WEIGHTS;
        let root_name = c_str((*root).name.as_ptr());
        SrcSnap {
            addr: t as usize,
            op: r.op,
            type_: r.type_,
            ne: r.ne,
            nb: r.nb,
            nbytes: sys::ggml_nbytes(t) as u64,
            is_weight: usage_weights || looks_like_weight(&root_name),
            name,
        }
    }
}

/// The tensor a scheduler copy `<backend>#<tensor>#<n>` was made from (the name itself otherwise).
pub(crate) fn orig_name(name: &str) -> &str {
    let mut parts = name.split('#');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(_), Some(orig), Some(_)) => orig,
        _ => name,
    }
}

/// Weight names as llama.cpp's loader gives them (used when a buffer usage is not set, e.g. a
/// scheduler copy `<backend>#<tensor>#<n>` of a weight for another backend).
pub(crate) fn looks_like_weight(name: &str) -> bool {
    let base = orig_name(name);
    base.ends_with(".weight") || base.ends_with(".bias") || base.ends_with(".ssm_a")
}

/// Copies everything the exporter, the classifier and the replay need out of a live node.
///
/// # Safety
/// `t` must point to a live graph node whose sources and view chains are live (true inside the
/// scheduler's eval callback).
pub(crate) unsafe fn snapshot(t: *const sys::ggml_tensor) -> NodeSnap {
    // SAFETY: guaranteed by the caller.
    unsafe {
        let r = &*t;
        let me = snap_src(t);
        let mut srcs = Vec::new();
        for &s in r.src.iter() {
            if s.is_null() {
                continue;
            }
            srcs.push(snap_src(s));
        }
        let root = view_root(t);
        let root_name = (!r.view_src.is_null()).then(|| c_str((*root).name.as_ptr()));
        let buffer = if (*root).buffer.is_null() {
            r.buffer
        } else {
            (*root).buffer
        };
        let device = if buffer.is_null() || sys::ggml_backend_buffer_is_host(buffer) {
            0
        } else {
            sys::ggml_backend_buft_get_device(sys::ggml_backend_buffer_get_type(buffer)) as usize
        };
        // Nodes of unselected `ggml_build_forward_select` branches lack the COMPUTE flag and
        // are skipped by every backend.
        let skipped = r.flags & sys::GGML_TENSOR_FLAG_COMPUTE as i32 == 0;
        let is_noop = is_view_op(r.op) || sys::ggml_is_empty(t) || skipped;
        NodeSnap {
            op_name: op_name(r.op),
            op_params: r.op_params,
            view_root: root_name,
            srcs,
            device,
            is_noop,
            src_: me,
        }
    }
}

/// Ops that only reinterpret memory (ggml's `ggml_op_is_empty`).
pub(crate) fn is_view_op(op: sys::ggml_op) -> bool {
    matches!(
        op,
        sys::GGML_OP_NONE
            | sys::GGML_OP_RESHAPE
            | sys::GGML_OP_TRANSPOSE
            | sys::GGML_OP_VIEW
            | sys::GGML_OP_PERMUTE
    )
}

/// Device descriptions: `(name, description, is_gpu)` of the device a buffer or backend uses.
pub(crate) fn device_info(dev: sys::ggml_backend_dev_t) -> (String, String, bool) {
    if dev.is_null() {
        return ("CPU".into(), String::new(), false);
    }
    // SAFETY: `dev` comes from ggml's device registry, which lives for the process.
    unsafe {
        let t = sys::ggml_backend_dev_type(dev);
        (
            c_str(sys::ggml_backend_dev_name(dev)),
            c_str(sys::ggml_backend_dev_description(dev)),
            t == sys::GGML_BACKEND_DEVICE_TYPE_GPU || t == sys::GGML_BACKEND_DEVICE_TYPE_IGPU,
        )
    }
}

/// The first GPU device ggml knows, if any.
pub(crate) fn first_gpu() -> Option<sys::ggml_backend_dev_t> {
    init_once();
    // SAFETY: registry queries; the registry lives for the process.
    unsafe {
        let d = sys::ggml_backend_dev_by_type(sys::GGML_BACKEND_DEVICE_TYPE_GPU);
        (!d.is_null()).then_some(d)
    }
}

/// The CPU device.
pub(crate) fn cpu_device() -> sys::ggml_backend_dev_t {
    init_once();
    // SAFETY: registry query; the CPU backend is always registered.
    unsafe { sys::ggml_backend_dev_by_type(sys::GGML_BACKEND_DEVICE_TYPE_CPU) }
}

/// ggml's version and commit as compiled in.
pub(crate) fn ggml_version() -> String {
    // SAFETY: both return static strings.
    unsafe {
        format!(
            "{} ({})",
            c_str(sys::ggml_version()),
            c_str(sys::ggml_commit())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A failed load quotes llama.cpp's own reason even while other threads load (and so clear
    /// their tails) at the same time: the race that once made a CI run read only "failed to load
    /// model".
    #[test]
    fn a_load_error_keeps_its_reason_while_other_threads_clear_theirs() {
        let dir = std::env::temp_dir().join(format!("tally-ffi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad-magic.gguf");
        std::fs::write(&bad, b"NOTAGGUF-at-all-but-long-enough-to-read-a-header").unwrap();
        init_once();
        let stop = AtomicBool::new(false);
        let msgs = std::thread::scope(|s| {
            let clearer = s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    clear_log_tail();
                    log_sink_line("clearer's own line");
                }
            });
            // Collected first and asserted after the join: a failed assert inside the scope
            // would wait forever for the clearer.
            let msgs: Vec<String> = (0..400)
                .map(|_| {
                    Model::load(&bad, 0)
                        .err()
                        .map(|e| e.to_string())
                        .unwrap_or_default()
                })
                .collect();
            stop.store(true, Ordering::Relaxed);
            clearer.join().unwrap();
            msgs
        });
        for msg in &msgs {
            assert!(msg.contains("magic"), "the reason was lost: {msg}");
            assert!(
                !msg.contains("clearer"),
                "another thread's line leaked in: {msg}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Sends one warning through the real sink, as llama.cpp would.
    fn log_sink_line(text: &str) {
        let c = CString::new(text).unwrap();
        // SAFETY: a valid NUL-terminated string that outlives the call; no user data.
        unsafe { log_sink(sys::GGML_LOG_LEVEL_WARN, c.as_ptr(), std::ptr::null_mut()) };
    }
}
