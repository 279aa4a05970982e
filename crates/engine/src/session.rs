//! A sequence on a backend: prefill from a fresh state, then more tokens (a prompt in chunks, a
//! later turn, or decode one token at a time) after what the state already holds. Plans hold no
//! position (it is device data, written before each run), so one plan per batch length serves
//! every position; they are built once and cached.

use std::collections::HashMap;
use std::sync::Arc;

use tally_model::{Model, Plan, PlanOptions, View, build_plan};

use crate::EngineError;
use crate::backend::Backend;
use crate::exec::{ExecStats, Hook, NoHook, execute};

pub struct Session<B: Backend> {
    pub model: Arc<Model>,
    pub backend: B,
    pub opts: PlanOptions,
    max_ctx: usize,
    n_past: usize,
    /// One plan per batch length and number of logit rows.
    plans: HashMap<(usize, usize), Arc<Plan>>,
    /// Poison activations before every run (checks: an unwritten output shows as NaN).
    pub poison: bool,
    /// Most tokens one plan takes on the plain paths (llama.cpp's `n_ubatch`; 0: no limit): a
    /// longer prompt runs as consecutive batches of this many tokens (the last one shorter), so
    /// activation memory is bounded by the batch, not the prompt. The hooked paths (`*_with`)
    /// always run one plan: they measure that plan.
    pub ubatch: usize,
    /// With [`PlanOptions::hidden`]: the trunk's final hidden states (`hidden` values a row)
    /// of positions `hidden_base..n_past`, read back after each batch, for the MTP draft.
    hidden: Vec<f32>,
    hidden_base: usize,
}

/// The default [`Session::ubatch`], chosen by a sweep on the H200 (docs/results/2026-12-01-h200-round3/,
/// 35B-A3B Q4_K_M): pp8192 at batches of 2048/4096/8192 tokens and as one plan ran at 13,991 /
/// 15,376 / 16,869 / 16,874 tok/s, pp32768 at 12,287 / 13,325 / 14,479 / 16,192. At 8192 the
/// device peak stays 23.70 GiB for any prompt length (one plan of 32,768: 31.32 GiB). Smaller
/// batches give each expert fewer rows per grouped GEMM, hence the slope.
pub const DEFAULT_UBATCH: usize = 8192;

impl<B: Backend> Session<B> {
    /// A session whose state holds up to `max_ctx` positions.
    pub fn new(model: Arc<Model>, backend: B, max_ctx: usize) -> Result<Session<B>, EngineError> {
        let limit = model.config.context_length;
        if max_ctx > limit {
            return Err(EngineError::TooLong {
                tokens: max_ctx,
                max: limit,
                why: "the model's context_length",
            });
        }
        Ok(Session {
            model,
            backend,
            opts: PlanOptions::default(),
            max_ctx,
            n_past: 0,
            plans: HashMap::new(),
            poison: false,
            ubatch: DEFAULT_UBATCH,
            hidden: Vec::new(),
            hidden_base: 0,
        })
    }

    pub fn max_ctx(&self) -> usize {
        self.max_ctx
    }
    /// Tokens the state holds: the position of the next batch.
    pub fn n_past(&self) -> usize {
        self.n_past
    }

    /// Turns the trunk's hidden-state output on or off ([`PlanOptions::hidden`]); the plans
    /// built for the other setting are dropped.
    pub fn set_hidden(&mut self, on: bool) {
        if self.opts.hidden != on {
            self.opts.hidden = on;
            self.plans.clear();
            self.hidden.clear();
            self.hidden_base = self.n_past;
        }
    }

    /// The recorded final hidden states of positions `from..to` (`to - from` rows of the model's
    /// hidden size), if the session holds them all (see [`Session::set_hidden`]).
    pub fn hidden_rows(&self, from: usize, to: usize) -> Option<&[f32]> {
        let d = self.model.config.hidden;
        if from < self.hidden_base || to > self.n_past || from > to {
            return None;
        }
        let (a, b) = ((from - self.hidden_base) * d, (to - self.hidden_base) * d);
        self.hidden.get(a..b)
    }

    /// Drops the recorded hidden states of positions before `pos` (the draft has read them).
    pub fn forget_hidden_before(&mut self, pos: usize) {
        let d = self.model.config.hidden;
        if pos > self.hidden_base {
            let n = ((pos - self.hidden_base) * d).min(self.hidden.len());
            self.hidden.drain(..n);
            self.hidden_base = pos;
        }
    }

    /// After `plan` ran at position `n_past`: reads and records its hidden-state rows (when it
    /// has them), replacing any recorded for positions from `n_past` on.
    fn record_hidden(&mut self, plan: &Plan) -> Result<(), EngineError> {
        let Some(v) = plan.hidden else {
            return Ok(());
        };
        let d = self.model.config.hidden;
        if self.n_past < self.hidden_base {
            self.hidden.clear();
            self.hidden_base = self.n_past;
        }
        self.hidden.truncate((self.n_past - self.hidden_base) * d);
        self.backend.barrier()?;
        let rows = self.backend.read(plan, v)?;
        self.hidden.extend_from_slice(&rows);
        Ok(())
    }

    /// The plan for batches of `n_tokens` tokens, at any position (built on first use).
    pub fn plan(&mut self, n_tokens: usize) -> Result<Arc<Plan>, EngineError> {
        self.plan_rows(n_tokens, self.opts.logit_rows)
    }

    /// The plan for batches of `n_tokens` tokens whose last `logit_rows` get logits.
    pub fn plan_rows(
        &mut self,
        n_tokens: usize,
        logit_rows: usize,
    ) -> Result<Arc<Plan>, EngineError> {
        if let Some(p) = self.plans.get(&(n_tokens, logit_rows)) {
            return Ok(p.clone());
        }
        if n_tokens > self.max_ctx {
            return Err(self.too_long(n_tokens));
        }
        let opts = PlanOptions {
            logit_rows,
            ..self.opts.clone()
        };
        let p = Arc::new(build_plan(
            &self.model.config,
            n_tokens,
            self.max_ctx,
            &opts,
        )?);
        self.plans.insert((n_tokens, logit_rows), p.clone());
        Ok(p)
    }

    fn empty_batch() -> EngineError {
        EngineError::Unsupported("an empty batch has no logits".into())
    }

    fn too_long(&self, tokens: usize) -> EngineError {
        EngineError::TooLong {
            tokens,
            max: self.max_ctx,
            why: "this session's context",
        }
    }

    /// The plan of a batch of `ids` at position `n_past` (0 for a fresh sequence, whose state
    /// is cleared), its buffers prepared, the ids and the position uploaded.
    fn start(&mut self, ids: &[u32], n_past: usize) -> Result<Arc<Plan>, EngineError> {
        self.start_rows(ids, n_past, self.opts.logit_rows)
    }

    fn start_rows(
        &mut self,
        ids: &[u32],
        n_past: usize,
        logit_rows: usize,
    ) -> Result<Arc<Plan>, EngineError> {
        if ids.is_empty() {
            return Err(Self::empty_batch());
        }
        if n_past + ids.len() > self.max_ctx {
            return Err(self.too_long(n_past + ids.len()));
        }
        let plan = self.plan_rows(ids.len(), logit_rows)?;
        self.backend.prepare(&plan)?;
        if n_past == 0 {
            self.backend.reset_state()?;
            self.hidden.clear();
            self.hidden_base = 0;
        }
        if self.poison {
            self.backend.poison()?;
        }
        self.n_past = n_past;
        self.upload(&plan, ids)?;
        let pos = i32::try_from(n_past).map_err(|_| self.too_long(n_past))?;
        self.backend
            .write_i32(&plan, View::all(plan.pos, plan.buf(plan.pos)), &[pos])?;
        Ok(plan)
    }

    /// Checks the ids against the vocabulary and writes them into the plan's token buffer.
    pub(crate) fn upload(&mut self, plan: &Plan, ids: &[u32]) -> Result<(), EngineError> {
        let vocab = self.model.config.vocab;
        let data = ids
            .iter()
            .map(|&id| {
                if (id as usize) < vocab {
                    Ok(id as i32)
                } else {
                    Err(EngineError::TokenId { id, vocab })
                }
            })
            .collect::<Result<Vec<i32>, _>>()?;
        let v = View::all(plan.tokens, plan.buf(plan.tokens));
        self.backend.write_i32(plan, v, &data)
    }

    /// Runs `ids` as a fresh prompt through `hook`; returns the last token's logits.
    pub fn prefill_with(
        &mut self,
        ids: &[u32],
        hook: &mut dyn Hook,
    ) -> Result<(Vec<f32>, ExecStats), EngineError> {
        let plan = self.start(ids, 0)?;
        self.run_with(&plan, hook)
    }

    /// Runs `ids` as a fresh prompt on the backend's fastest path (a captured graph where the
    /// backend has one); returns the last token's logits and the dispatch count.
    /// A prompt longer than [`Session::ubatch`] runs as several batches.
    pub fn prefill_plain(&mut self, ids: &[u32]) -> Result<(Vec<f32>, ExecStats), EngineError> {
        let (plan, stats) = self.feed(ids, 0)?;
        self.read_logits(&plan, stats)
    }

    pub fn prefill(&mut self, ids: &[u32]) -> Result<Vec<f32>, EngineError> {
        Ok(self.prefill_plain(ids)?.0)
    }

    /// Appends `ids` to the sequence (the next chunk of a prompt, a later turn) through `hook`;
    /// returns the last token's logits. On a fresh session it is a prefill.
    pub fn append_with(
        &mut self,
        ids: &[u32],
        hook: &mut dyn Hook,
    ) -> Result<(Vec<f32>, ExecStats), EngineError> {
        let plan = self.start(ids, self.n_past)?;
        self.run_with(&plan, hook)
    }

    /// Appends `ids` to the sequence on the backend's fastest path; returns the last token's
    /// logits and the dispatch count.
    pub fn append(&mut self, ids: &[u32]) -> Result<(Vec<f32>, ExecStats), EngineError> {
        let (plan, stats) = self.feed(ids, self.n_past)?;
        self.read_logits(&plan, stats)
    }

    /// Issues `ids` at position `n_past` on the fastest path, in batches of at most
    /// [`Session::ubatch`] tokens, without waiting; returns the last batch's plan (its logits
    /// view holds the last token's once the work completes) and the dispatches of all batches.
    fn feed(&mut self, ids: &[u32], n_past: usize) -> Result<(Arc<Plan>, ExecStats), EngineError> {
        let step = if self.ubatch == 0 {
            ids.len().max(1)
        } else {
            self.ubatch
        };
        if ids.is_empty() {
            return Err(Self::empty_batch());
        }
        if n_past + ids.len() > self.max_ctx {
            return Err(self.too_long(n_past + ids.len()));
        }
        let mut total = ExecStats::default();
        let mut last = None;
        let mut at = n_past;
        for chunk in ids.chunks(step) {
            let plan = self.start(chunk, at)?;
            let stats = self.dispatch_plain(&plan)?;
            total.dispatches += stats.dispatches;
            total.replays += stats.replays;
            total.graph = stats.graph;
            at = self.n_past;
            last = Some(plan);
        }
        last.map(|plan| (plan, total)).ok_or_else(Self::empty_batch)
    }

    /// Appends one token to the sequence through `hook`; returns its logits.
    pub fn decode_with(&mut self, id: u32, hook: &mut dyn Hook) -> Result<Vec<f32>, EngineError> {
        self.check_decode()?;
        Ok(self.append_with(&[id], hook)?.0)
    }

    /// Appends one token on the backend's fastest path (the one-token plan's captured graph,
    /// relaunched at every position, where the backend has graphs); returns its logits.
    pub fn decode(&mut self, id: u32) -> Result<Vec<f32>, EngineError> {
        let plan = self.decode_run(id)?;
        self.backend.barrier()?;
        self.backend.read(&plan, plan.logits)
    }

    /// [`Session::decode`] without reading the logits: returns the plan whose logits view holds
    /// them once the (possibly still running) dispatches complete, e.g. for
    /// [`Backend::sample`](crate::Backend::sample).
    pub fn decode_run(&mut self, id: u32) -> Result<Arc<Plan>, EngineError> {
        self.check_decode()?;
        let plan = self.start(&[id], self.n_past)?;
        self.dispatch_plain(&plan)?;
        Ok(plan)
    }

    fn check_decode(&self) -> Result<(), EngineError> {
        if self.n_past == 0 {
            return Err(EngineError::Unsupported(
                "decode needs a prefill first".into(),
            ));
        }
        Ok(())
    }

    /// Every node through `hook`, then the logits; the position moves on.
    fn run_with(
        &mut self,
        plan: &Plan,
        hook: &mut dyn Hook,
    ) -> Result<(Vec<f32>, ExecStats), EngineError> {
        let stats = execute(&mut self.backend, plan, hook)?;
        self.finish(plan, stats)
    }

    /// Issues `plan`'s work on the fastest path (the plan's kept graph, or its capture launched
    /// once, or node by node) without waiting for it; the position moves on by the plan's
    /// tokens. A graph run counts as dispatched the nodes its capture dispatched, less the work
    /// the graph turns out to lack ([`crate::backend::GraphCount::missing`]): so the ledger's
    /// probe check (dispatches = work nodes) fails when a launch is lost.
    fn dispatch_plain(&mut self, plan: &Plan) -> Result<ExecStats, EngineError> {
        let launched = self.backend.graph_launch(plan)?;
        let captured = !launched && self.backend.capture_begin(plan)?;
        let mut stats = if launched {
            ExecStats::default()
        } else if captured {
            let stats = execute(&mut self.backend, plan, &mut NoHook);
            // End the capture even when a dispatch failed, so the stream is usable again.
            let end = self.backend.capture_end(plan, stats.is_ok());
            let stats = stats?;
            end?;
            stats
        } else {
            execute(&mut self.backend, plan, &mut NoHook)?
        };
        if launched || captured {
            let g = self.backend.graph_count(plan).ok_or_else(|| {
                EngineError::Internal("a graph run without the graph's counts".into())
            })?;
            stats.dispatches = g.dispatches.saturating_sub(g.missing());
            stats.graph = Some(g);
        }
        self.record_hidden(plan)?;
        self.n_past += plan.n_tokens;
        Ok(stats)
    }

    /// Waits for `plan`'s work and reads its logits.
    fn read_logits(
        &mut self,
        plan: &Plan,
        stats: ExecStats,
    ) -> Result<(Vec<f32>, ExecStats), EngineError> {
        self.backend.barrier()?;
        let logits = self.backend.read(plan, plan.logits)?;
        Ok((logits, stats))
    }

    fn finish(
        &mut self,
        plan: &Plan,
        stats: ExecStats,
    ) -> Result<(Vec<f32>, ExecStats), EngineError> {
        self.record_hidden(plan)?;
        self.n_past += plan.n_tokens;
        self.read_logits(plan, stats)
    }
}

/// Resuming a sequence: prompts that continue the current state, and saved states.
impl<B: Backend> Session<B> {
    /// Appends `ids` to the sequence (a fresh prefill when it is empty) without reading the
    /// logits; returns the plan whose logits view holds the last token's once its dispatches
    /// complete. Several tokens after `n_past > 0` run as one plan of `ids.len()` tokens at
    /// position `n_past` (a chunked prefill).
    pub fn extend_run(&mut self, ids: &[u32]) -> Result<Arc<Plan>, EngineError> {
        Ok(self.feed(ids, self.n_past)?.0)
    }

    /// [`Session::extend_run`], then the last token's logits.
    pub fn extend(&mut self, ids: &[u32]) -> Result<Vec<f32>, EngineError> {
        let plan = self.extend_run(ids)?;
        self.backend.barrier()?;
        self.backend.read(&plan, plan.logits)
    }

    /// Appends `ids` as one batch on the fastest path with logits for every one of them: row
    /// `i` of the result (`vocab` values each) scores the token after `ids[i]`. Speculative
    /// decoding verifies drafts with it.
    pub fn verify(&mut self, ids: &[u32]) -> Result<Vec<f32>, EngineError> {
        let plan = self.start_rows(ids, self.n_past, ids.len())?;
        self.dispatch_plain(&plan)?;
        self.backend.barrier()?;
        self.backend.read(&plan, plan.logits)
    }

    /// [`Session::verify`] for greedy decoding without penalties: the greedy token after each of
    /// `ids` (the argmax of each logits row, taken where the backend takes it: on a GPU only the
    /// ids travel, not `ids.len()` rows of the vocabulary).
    pub fn verify_greedy(&mut self, ids: &[u32]) -> Result<Vec<u32>, EngineError> {
        let plan = self.start_rows(ids, self.n_past, ids.len())?;
        self.dispatch_plain(&plan)?;
        self.backend.argmax_rows(&plan)
    }

    /// [`Session::decode`] for greedy decoding without penalties: the greedy token after `id`.
    pub fn decode_greedy(&mut self, id: u32) -> Result<u32, EngineError> {
        let plan = self.decode_run(id)?;
        let best = self.backend.argmax_rows(&plan)?;
        best.first()
            .copied()
            .ok_or_else(|| EngineError::Internal("a decode step without a logits row".into()))
    }

    /// Saves the conv and recurrent states into backend slot `slot` (not the KV caches: a
    /// later batch at position `p` writes cache rows `p..` only, so rows before the saved
    /// position stay valid). Restore with [`Session::restore`] at the position saved; returns
    /// the bytes saved.
    pub fn save_recurrent(&mut self, slot: u64) -> Result<usize, EngineError> {
        // The state buffers' names only: no prepare, which on a GPU would swap the buffers of
        // the plan in use (the states exist once any batch has run).
        if self.n_past == 0 {
            return Err(EngineError::Unsupported(
                "nothing to save before the first batch".into(),
            ));
        }
        let extents = self.recurrent_extents()?;
        self.backend.barrier()?;
        self.backend.save_state(slot, &extents)
    }

    /// The conv and recurrent state buffers, whole (not the KV caches), by name.
    fn recurrent_extents(&mut self) -> Result<Vec<crate::backend::StateExtent>, EngineError> {
        let plan = self.plan(1)?;
        Ok(self
            .state_extents(&plan)
            .into_iter()
            .filter(|e| !is_kv_cache(&e.name))
            .collect())
    }

    /// Has the backend keep, from now on, the conv and recurrent states after each token of
    /// every batch of 2..=`max_tokens` tokens, so that a partly rejected verification goes back
    /// with [`Session::rollback_to_token`] instead of a restore and a recompute. False when the
    /// backend does not (the CPU) or before the first batch (the states do not exist yet).
    pub fn enable_token_states(&mut self, max_tokens: usize) -> Result<bool, EngineError> {
        if self.n_past == 0 {
            return Ok(false);
        }
        let extents = self.recurrent_extents()?;
        self.backend.barrier()?;
        self.backend.enable_token_states(&extents, max_tokens)
    }

    /// After a batch of `batch` tokens at position `n0` (the last one run): goes back to the
    /// state after its token `index` (position `n0 + index + 1`), from the states the backend
    /// kept ([`Session::enable_token_states`]). The KV rows past it are written again before
    /// they are read. False, with nothing changed, when the backend did not keep them.
    pub fn rollback_to_token(
        &mut self,
        n0: usize,
        index: usize,
        batch: usize,
    ) -> Result<bool, EngineError> {
        if n0 + batch != self.n_past || index >= batch {
            return Err(EngineError::Internal(format!(
                "rollback to token {index} of a {batch}-token batch at {n0}, at position {}",
                self.n_past
            )));
        }
        if !self.backend.restore_token_states(index, batch)? {
            return Ok(false);
        }
        self.n_past = n0 + index + 1;
        Ok(true)
    }

    /// Restores the conv and recurrent states [`Session::save_recurrent`] saved into `slot`
    /// when the sequence held `n_past` positions, and goes back to that position (the KV
    /// rows before it were never touched since).
    pub fn restore_recurrent(&mut self, slot: u64, n_past: usize) -> Result<(), EngineError> {
        if n_past == 0 || n_past > self.n_past {
            return Err(EngineError::Unsupported(format!(
                "cannot go back to position {n_past} from {}",
                self.n_past
            )));
        }
        self.backend.barrier()?;
        self.backend.restore_state(slot)?;
        self.n_past = n_past;
        Ok(())
    }

    /// The bytes of persistent state that describe the sequence now: for each state buffer of
    /// `plan`, the KV caches' first `n_past` rows, the conv and recurrent states whole.
    pub fn state_extents(&self, plan: &Plan) -> Vec<crate::backend::StateExtent> {
        plan.buffers
            .iter()
            .filter(|b| b.kind == tally_model::BufKind::State)
            .map(|b| {
                let row = b.cols * b.dtype.size_bytes();
                let rows = if is_kv_cache(&b.name) {
                    self.n_past.min(b.rows)
                } else {
                    b.rows
                };
                crate::backend::StateExtent {
                    name: b.name.clone(),
                    bytes: rows * row,
                }
            })
            .collect()
    }

    /// A plan at the current position, prepared, so every state buffer exists.
    fn any_prepared_plan(&mut self) -> Result<Arc<Plan>, EngineError> {
        let plan = self.plan(1)?;
        self.backend.prepare(&plan)?;
        Ok(plan)
    }

    /// Saves the sequence's state into backend slot `slot`; returns the bytes saved.
    pub fn save(&mut self, slot: u64) -> Result<usize, EngineError> {
        let plan = self.any_prepared_plan()?;
        let extents = self.state_extents(&plan);
        self.backend.barrier()?;
        self.backend.save_state(slot, &extents)
    }

    /// Restores slot `slot`, saved when the sequence held `n_past` positions.
    pub fn restore(&mut self, slot: u64, n_past: usize) -> Result<(), EngineError> {
        if n_past > self.max_ctx {
            return Err(EngineError::TooLong {
                tokens: n_past,
                max: self.max_ctx,
                why: "this session's context",
            });
        }
        self.n_past = n_past;
        let restored = self
            .any_prepared_plan()
            .and_then(|_| self.backend.restore_state(slot));
        if restored.is_err() {
            self.n_past = 0;
        }
        restored
    }

    /// Forgets the sequence (the next extend is a fresh prefill).
    pub fn clear(&mut self) {
        self.n_past = 0;
    }
}

/// Whether state buffer `name` is an attention layer's K or V cache (rows by position).
fn is_kv_cache(name: &str) -> bool {
    name.ends_with("k_cache") || name.ends_with("v_cache")
}
