//! A sequence on a backend: prefill from a fresh state, then decode one token at a time. Plans are
//! built once per (batch, past) shape and cached.

use std::collections::HashMap;
use std::sync::Arc;

use tally_model::{Model, Plan, PlanOptions, build_plan};

use crate::EngineError;
use crate::backend::Backend;
use crate::exec::{ExecStats, Hook, NoHook, execute, execute_segmented, position_dependent};

pub struct Session<B: Backend> {
    pub model: Arc<Model>,
    pub backend: B,
    pub opts: PlanOptions,
    max_ctx: usize,
    n_past: usize,
    plans: HashMap<(usize, usize), Arc<Plan>>,
    /// Which nodes of the one-token plan depend on the position (computed once).
    decode_dynamic: Option<Vec<bool>>,
}

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
            decode_dynamic: None,
        })
    }

    pub fn max_ctx(&self) -> usize {
        self.max_ctx
    }
    pub fn n_past(&self) -> usize {
        self.n_past
    }

    /// The plan for `n_tokens` new tokens after `n_past` (built on first use).
    pub fn plan(&mut self, n_tokens: usize, n_past: usize) -> Result<Arc<Plan>, EngineError> {
        if let Some(p) = self.plans.get(&(n_tokens, n_past)) {
            return Ok(p.clone());
        }
        if n_past + n_tokens > self.max_ctx {
            return Err(EngineError::TooLong {
                tokens: n_past + n_tokens,
                max: self.max_ctx,
                why: "this session's context",
            });
        }
        let p = Arc::new(build_plan(
            &self.model.config,
            n_tokens,
            n_past,
            self.max_ctx,
            &self.opts,
        )?);
        // Decode plans differ for every position; keep the cache from growing without bound.
        if self.plans.len() > 64 {
            self.plans.clear();
        }
        self.plans.insert((n_tokens, n_past), p.clone());
        Ok(p)
    }

    /// The plan of a fresh prompt, its buffers prepared, the state cleared, the ids uploaded.
    fn start_prefill(&mut self, ids: &[u32]) -> Result<Arc<Plan>, EngineError> {
        if ids.is_empty() {
            return Err(EngineError::Unsupported(
                "an empty prompt has no logits".into(),
            ));
        }
        let plan = self.plan(ids.len(), 0)?;
        self.backend.prepare(&plan)?;
        self.backend.reset_state()?;
        self.n_past = 0;
        self.upload(&plan, ids)?;
        Ok(plan)
    }

    /// Checks the ids against the vocabulary and writes them into the plan's token buffer.
    fn upload(&mut self, plan: &Plan, ids: &[u32]) -> Result<(), EngineError> {
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
        let v = tally_model::View::all(plan.tokens, plan.buf(plan.tokens));
        self.backend.write_i32(plan, v, &data)
    }

    /// Runs `ids` as a fresh prompt through `hook`; returns the last token's logits.
    pub fn prefill_with(
        &mut self,
        ids: &[u32],
        hook: &mut dyn Hook,
    ) -> Result<(Vec<f32>, ExecStats), EngineError> {
        let plan = self.start_prefill(ids)?;
        let out = self.run(&plan, hook)?;
        self.n_past = ids.len();
        Ok(out)
    }

    /// Runs `ids` as a fresh prompt on the backend's fastest path (a captured graph where the
    /// backend has one); returns the last token's logits and the dispatch count.
    pub fn prefill_plain(&mut self, ids: &[u32]) -> Result<(Vec<f32>, ExecStats), EngineError> {
        let plan = self.start_prefill(ids)?;
        let stats = if self.backend.graph_launch(&plan)? {
            ExecStats {
                dispatches: plan.nodes.len() as u64,
                replays: 0,
            }
        } else if self.backend.capture_begin(&plan)? {
            let stats = execute(&mut self.backend, &plan, &mut NoHook);
            // End the capture even when a dispatch failed, so the stream is usable again.
            let end = self.backend.capture_end(&plan);
            let stats = stats?;
            end?;
            stats
        } else {
            execute(&mut self.backend, &plan, &mut NoHook)?
        };
        self.backend.barrier()?;
        let logits = self.backend.read(&plan, plan.logits)?;
        self.n_past = ids.len();
        Ok((logits, stats))
    }

    pub fn prefill(&mut self, ids: &[u32]) -> Result<Vec<f32>, EngineError> {
        Ok(self.prefill_plain(ids)?.0)
    }

    /// Appends one token to the sequence; returns its logits.
    pub fn decode_with(&mut self, id: u32, hook: &mut dyn Hook) -> Result<Vec<f32>, EngineError> {
        let plan = self.start_decode(id)?;
        execute(&mut self.backend, &plan, hook)?;
        self.finish_decode(&plan)
    }

    /// Appends one token on the backend's fastest path: the position-independent stretches of
    /// the plan run as kept segments where the backend keeps them (CUDA graphs), the nodes that
    /// depend on the position are dispatched each time; returns the token's logits.
    pub fn decode(&mut self, id: u32) -> Result<Vec<f32>, EngineError> {
        let plan = self.decode_run(id)?;
        self.backend.barrier()?;
        self.backend.read(&plan, plan.logits)
    }

    /// [`Session::decode`] without reading the logits: returns the plan whose logits view holds
    /// them once the (possibly still running) dispatches complete, e.g. for
    /// [`Backend::sample`](crate::Backend::sample).
    pub fn decode_run(&mut self, id: u32) -> Result<Arc<Plan>, EngineError> {
        let plan = self.start_decode(id)?;
        if self
            .decode_dynamic
            .as_ref()
            .is_none_or(|d| d.len() != plan.nodes.len())
        {
            // The neighbouring position below always fits the context.
            let neighbour = self.plan(1, self.n_past - 1)?;
            self.decode_dynamic = position_dependent(&plan, &neighbour);
        }
        match &self.decode_dynamic {
            Some(dynamic) => execute_segmented(&mut self.backend, &plan, dynamic)?,
            None => execute(&mut self.backend, &plan, &mut NoHook)?,
        };
        self.finish_step()?;
        Ok(plan)
    }

    /// The one-token plan at the current position, prepared, with `id` uploaded.
    fn start_decode(&mut self, id: u32) -> Result<Arc<Plan>, EngineError> {
        if self.n_past == 0 {
            return Err(EngineError::Unsupported(
                "decode needs a prefill first".into(),
            ));
        }
        let plan = self.plan(1, self.n_past)?;
        self.backend.prepare(&plan)?;
        self.upload(&plan, &[id])?;
        Ok(plan)
    }

    /// After `plan`'s dispatches: the token's logits, and the position moves on.
    fn finish_decode(&mut self, plan: &Plan) -> Result<Vec<f32>, EngineError> {
        self.finish_step()?;
        self.backend.barrier()?;
        self.backend.read(plan, plan.logits)
    }

    /// After a one-token plan's dispatches are issued: the position moves on.
    fn finish_step(&mut self) -> Result<(), EngineError> {
        // While the device works: build the next position's plan (~0.5 ms of host work for the
        // 35B-A3B that would otherwise sit between two tokens), and drop the previous one (a
        // plan per position would grow without bound over a long generation).
        if self.n_past + 2 <= self.max_ctx {
            self.plan(1, self.n_past + 1)?;
        }
        self.plans.remove(&(1, self.n_past - 1));
        self.n_past += 1;
        Ok(())
    }

    fn run(
        &mut self,
        plan: &Plan,
        hook: &mut dyn Hook,
    ) -> Result<(Vec<f32>, ExecStats), EngineError> {
        let stats = execute(&mut self.backend, plan, hook)?;
        self.backend.barrier()?;
        let logits = self.backend.read(plan, plan.logits)?;
        Ok((logits, stats))
    }
}

/// Resuming a sequence: prompts that continue the current state, and saved states.
impl<B: Backend> Session<B> {
    /// Appends `ids` to the sequence (a fresh prefill when it is empty) without reading the
    /// logits; returns the plan whose logits view holds the last token's once its dispatches
    /// complete. Several tokens after `n_past > 0` run as one plan of `ids.len()` tokens at
    /// position `n_past` (a chunked prefill).
    pub fn extend_run(&mut self, ids: &[u32]) -> Result<Arc<Plan>, EngineError> {
        if self.n_past == 0 {
            let plan = self.start_prefill(ids)?;
            if !self.backend.graph_launch(&plan)? {
                execute(&mut self.backend, &plan, &mut NoHook)?;
            }
            self.n_past = ids.len();
            return Ok(plan);
        }
        match ids {
            [] => Err(EngineError::Unsupported(
                "an empty continuation has no logits".into(),
            )),
            [id] => self.decode_run(*id),
            _ => {
                let plan = self.plan(ids.len(), self.n_past)?;
                self.backend.prepare(&plan)?;
                self.upload(&plan, ids)?;
                execute(&mut self.backend, &plan, &mut NoHook)?;
                self.n_past += ids.len();
                Ok(plan)
            }
        }
    }

    /// [`Session::extend_run`], then the last token's logits.
    pub fn extend(&mut self, ids: &[u32]) -> Result<Vec<f32>, EngineError> {
        let plan = self.extend_run(ids)?;
        self.backend.barrier()?;
        self.backend.read(&plan, plan.logits)
    }

    /// The bytes of persistent state that describe the sequence now: for each state buffer of
    /// `plan`, the KV caches' first `n_past` rows, the conv and recurrent states whole.
    pub fn state_extents(&self, plan: &Plan) -> Vec<crate::backend::StateExtent> {
        plan.buffers
            .iter()
            .filter(|b| b.kind == tally_model::BufKind::State)
            .map(|b| {
                let row = b.cols * b.dtype.size_bytes();
                let rows = if b.name.ends_with("k_cache") || b.name.ends_with("v_cache") {
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
        let plan = self.plan(1, self.n_past.min(self.max_ctx - 1))?;
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
